"""How each sample layout lays a recorded episode out as conversations (for verifying and rebuilding prompts).

- `trajectory`: one conversation; turn k's prompt is the whole episode before it.
- `step`: turn k's prompt is the system prompt + the last `history_turns` turns; once the first observation
  has slid out of that window the task is restated before it (`window_message`).
- `fold`: a trajectory that, once its prompt passes a budget, starts a new *segment*: a model-written summary
  turn (`info["fold"] == "summary"`) closes the old segment, and the next turn's prompt is the system prompt +
  a fold message (the task and the env's `state_summary()`, kept in that turn's `info["fold_message"]`) + the
  summary's own generated ids + the current observation. Each segment is token-in-token-out exact on its own,
  so it trains as one sequence (`fold_segments`), the summary in the segment it was generated in.
"""
from __future__ import annotations

from typing import Any, Sequence

from agentgym.chat import ChatFormat
from agentgym.trajectory import Trajectory, Turn

TASK_REMINDER = "{task}\n\n[{n} earlier turn(s) not shown]\n\n"
FOLD_REQUEST = ("\n\n[Context almost full: the turns so far will be folded away. Reply with a short summary of "
                "the task, what you did and found, and what is left to do; this reply is not an action.]")
FOLD_MESSAGE = "{task}\n\n[{n} earlier turn(s) folded away{state}]"


def window_message(task: str, observation: str, start: int) -> str:
    """The first user message of a step-layout prompt whose history window starts at turn `start`."""
    if start == 0 or not task or task in observation:
        return observation
    return TASK_REMINDER.format(task=task, n=start) + observation


def fold_message(task: str, state: str, folded_turns: int) -> str:
    """The first user message of a fold segment: the task, how many turns were folded, the env's state summary."""
    state = f"; where things stand:\n{state.strip()}" if state and state.strip() else ""
    return FOLD_MESSAGE.format(task=task.strip(), n=folded_turns, state=state)


def is_summary(turn: Turn) -> bool:
    return turn.info.get("fold") == "summary"


def fold_segments(turns: Sequence[Turn]) -> list[tuple[int, int]]:
    """[start, end) of each fold segment: a new one starts at every turn carrying `info["fold_message"]`."""
    starts = [0] + [k for k, t in enumerate(turns) if k > 0 and "fold_message" in t.info]
    return [(a, b) for a, b in zip(starts, starts[1:] + [len(turns)]) if b > a]


def _assistant(turn: Turn) -> dict[str, Any]:
    return {"role": "assistant", "content": turn.action, "token_ids": list(turn.response_ids)}


def fold_messages(chat: ChatFormat, traj: Trajectory, t: int, tools: Sequence[Any] | None = None
                  ) -> list[dict[str, Any]]:
    """The conversation turn `t` of a fold-layout episode was prompted with (for `ChatFormat.verify`)."""
    turns = traj.turns
    start = max(a for a, _ in fold_segments(turns[:t + 1]))
    first = turns[start]
    if start == 0:
        messages = chat.initial_messages(traj.system_prompt, first.observation, tools)
    elif is_summary(turns[start - 1]):  # fold message, the summary as generated, the observation again
        messages = chat.initial_messages(traj.system_prompt, first.info["fold_message"], tools)
        messages += [_assistant(turns[start - 1]), {"role": "user", "content": first.observation}]
    else:  # folded without a summary turn: the fold message holds the observation
        messages = chat.initial_messages(traj.system_prompt, first.info["fold_message"], tools)
    for j in range(start, t):
        messages += [_assistant(turns[j]), {"role": "user", "content": turns[j + 1].observation}]
    return messages


def step_messages(chat: ChatFormat, traj: Trajectory, t: int, history_turns: int, tools: Sequence[Any] | None = None
                  ) -> list[dict[str, Any]]:
    """The conversation turn `t` of a step-layout episode was prompted with (for `ChatFormat.verify`)."""
    turns, start = traj.turns, max(0, t - history_turns)
    messages = chat.initial_messages(traj.system_prompt, window_message(traj.task, turns[start].observation, start),
                                     tools)
    for j in range(start, t):
        messages += [_assistant(turns[j]), {"role": "user", "content": turns[j + 1].observation}]
    return messages


def layout_messages(chat: ChatFormat, traj: Trajectory, t: int, layout: str, history_turns: int,
                    tools: Sequence[Any] | None = None) -> list[dict[str, Any]]:
    """The conversation behind turn `t`'s prompt in `layout`."""
    if layout == "step":
        return step_messages(chat, traj, t, history_turns, tools)
    if layout == "fold":
        return fold_messages(chat, traj, t, tools)
    messages = chat.trajectory_messages(traj, tools)
    return messages[:len(messages) - 2 * (len(traj.turns) - 1 - t)]


def next_prompt_ids(chat: ChatFormat, traj: Trajectory, layout: str, history_turns: int,
                    tools: Sequence[Any] | None = None) -> list[int]:
    """The prompt a next turn would have had: the state after the last turn, whose value GAE bootstraps
    from when an episode was cut off (turn limit, full context) rather than terminated. (Fold layout: the
    last segment continued; a fold that a full context cut short is not replayed.)"""
    turns, t = traj.turns, len(traj.turns)
    observations = [k.observation for k in turns] + [traj.final_observation]
    if layout in ("trajectory", "fold"):
        return chat.continue_prompt(turns[-1].prompt_ids, turns[-1].response_ids, traj.final_observation)
    start = max(0, t - history_turns)
    ids = chat.initial_prompt(traj.system_prompt, window_message(traj.task, observations[start], start), tools)
    for j in range(start, t):
        ids += [*turns[j].response_ids, *chat.turn_suffix(turns[j].response_ids, observations[j + 1])]
    return ids
