"""A session's calls -> token-exact segments -> one `Trajectory` the trainer takes like any rollout.

The merge rule (exact token prefix, nothing else):

    Calls are taken in the order they were recorded. Each open segment's sequence is the prompt ids + the
    completion ids of its last call. A call joins the segment whose sequence is a prefix of the call's prompt
    ids (the longest one, if several are), and that segment's sequence becomes the call's prompt +
    completion. A call whose prompt extends no segment's sequence starts a new segment.

So a harness that appends to its conversation keeps one sequence, in which every call's completion sits at
its own offset and every token between completions (template, tool results, the next user message) is
prompt; a harness that rewrites its history (drops or summarises turns, edits an answer, starts a
sub-agent) starts a new segment, and a sub-agent whose calls interleave with its parent's continues its own
segment rather than breaking the parent's. Whether a prompt extends a sequence is decided on token ids only;
text never is.

In the `Trajectory`, the turns are the calls grouped by segment (segment order: its first call's), and each
segment after the first starts at a turn carrying `info["fold_message"]`: the trainer's `fold` layout
(`agentgym.engine.layouts.fold_segments`) then builds one sample per segment, and the `trajectory` layout accepts
sessions of one segment. The session's reward is on the last turn, each call's own reward on its turn. A
turn's observation and anchor are the call's newest user or tool message (what it answered): calls of a
group that answered the same message acted from the same state, which is what GiGPO's step groups compare.
"""
from __future__ import annotations

from typing import Any, Sequence

from agentgym.trajectory import Trajectory, Turn
from agentgym.train.gateway.sessions import Call, Session


def segments(calls: Sequence[Call]) -> list[list[int]]:
    """The merge rule: positions in `calls` of each segment's calls, segments in order of their first call."""
    members: list[list[int]] = []
    sequences: list[tuple[int, ...]] = []
    for pos, call in enumerate(calls):
        prompt = call.prompt_ids
        best = -1
        for s, seq in enumerate(sequences):
            if len(seq) <= len(prompt) and prompt[:len(seq)] == seq and (best < 0 or len(seq) > len(sequences[best])):
                best = s
        if best < 0:
            members.append([pos])
            sequences.append(prompt + call.completion_ids)
        else:
            members[best].append(pos)
            sequences[best] = prompt + call.completion_ids
    return members


def session_trajectory(session: Session, group_id: int, sample_index: int, env_id: str = "gateway",
                       seed: int | None = None, success_at: float = 1.0) -> Trajectory:
    """The session as a `Trajectory` of its calls. `success` is the session's own flag where the harness gave
    one, else reward >= `success_at`; a session the harness failed (or left without a reward) ends "failed"
    with its error set, so the trainer drops it like any failed episode."""
    calls = session.calls
    segs = segments(calls)
    order = [pos for seg in segs for pos in seg]
    starts = {seg[0] for seg in segs[1:]}
    reward = session.reward
    error = session.error or (None if reward is not None else "the session ended without a reward")
    if not calls and error is None:
        error = "the session made no calls"
    turns = []
    for k, pos in enumerate(order):
        c = calls[pos]
        last = k == len(order) - 1
        info: dict[str, object] = {"call": c.index, "spliced": c.spliced, "retokenized": c.retokenized}
        if pos in starts:
            info["fold_message"] = ""  # a new segment: the prompt does not extend the earlier calls
        turns.append(Turn(index=k, observation=c.observation, action=c.text, prompt_ids=c.prompt_ids,
                          response_ids=c.completion_ids, logprobs=c.logprobs, anchor=c.observation or None,
                          reward=session.call_rewards.get(c.index, 0.0) + ((reward or 0.0) if last else 0.0),
                          terminated=last and error is None, finish_reason=c.finish_reason, tool_calls=c.tool_calls,
                          generate_s=c.generate_s, info=info, policy_version=c.policy_version))
    total = sum(t.reward for t in turns)
    success = session.success if session.success is not None else total >= success_at
    return Trajectory(env_id=env_id, seed=session.group if seed is None else seed, group_id=group_id,
                      sample_index=sample_index, turns=tuple(turns), success=bool(success) and error is None,
                      end_reason="failed" if error else "terminated", task_id=str(session.task or ""),
                      error=error, task=str(session.task or ""))


def session_summary(session: Session) -> dict[str, Any]:
    """What GET /v1/sessions/ID shows: status, counts, rewards (JSON types)."""
    return {"id": session.id, "object": "session", "status": session.status, "task": session.task,
            "group": session.group, "sample": session.sample, "calls": len(session.calls),
            "segments": len(segments(session.calls)), "lost_calls": session.lost_calls, "reward": session.reward,
            "success": session.success, "call_rewards": {str(k): v for k, v in sorted(session.call_rewards.items())},
            "error": session.error}
