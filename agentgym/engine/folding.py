"""The rollout engine's side of the `fold` layout (see `agentgym.engine.layouts` for the shape of a folded episode).

Before a request whose prompt + a turn's tokens would pass the fold budget, the engine asks the model for a
summary instead: the same segment continues with the current observation + `FOLD_REQUEST`, and the reply
becomes a turn of its own (reward 0, the env is not stepped) whose tokens are trained like any action, so the
episode's outcome reaches it. Then the next segment starts from the system prompt, the fold message (the
task and the env's `state_summary()`), the summary's generated ids as they are, and the current observation.
Nothing generated is ever re-tokenized, so token-in-token-out holds in every segment.
"""
from __future__ import annotations

from typing import Any, Sequence

from agentgym.chat import TRUNCATION_MARKER
from agentgym.engine.layouts import FOLD_REQUEST, fold_message
from agentgym.policy import Generation, GenerationRequest
from agentgym.trajectory import Turn, history_keys


def fold_budget(config: Any, context_limit: int | None) -> int | None:
    """Fold once a prompt + a turn's tokens would pass this: `fold_at_tokens`, else 3/4 of the context limit
    (the rest leaves room for the summary turn)."""
    if config.fold_at_tokens is not None:
        return config.fold_at_tokens if context_limit is None else min(config.fold_at_tokens, context_limit)
    return None if context_limit is None else context_limit * 3 // 4


def fold_prompt(engine: Any, ep: Any) -> list[int]:
    """The prompt of the episode's next request, folding first when it would pass the budget. A segment that
    holds no env turn yet is never folded again (its prompt cannot shrink), the context limit then decides."""
    budget = engine.fold_at
    if budget is None or ep.segment_turns == 0 or len(ep.prompt) + engine.config.sampling.max_tokens <= budget:
        return ep.prompt
    if not engine.config.fold_summary:
        start_segment(engine, ep, summary_ids=None)
        return ep.prompt
    response, after = ep.pieces[-1]
    head = ep.prompt[:len(ep.prompt) - len(after)]
    ep.summarising = True
    ep.summary_obs = summary_observation(engine, head, response, ep.obs)
    return head + engine.chat.turn_suffix(response, ep.summary_obs)


def summary_observation(engine: Any, head: list[int], response: Sequence[int], obs: str) -> str:
    """The summary request's user message: the current observation + `FOLD_REQUEST`, the observation cut to what
    the context has room for. One turn can carry the prompt from under the fold budget to near the limit (an
    observation of up to `max_observation_tokens`); the summary is about the turns already seen, and the next
    segment gets the whole observation again, so cutting it here loses nothing the episode needs."""
    message, limit = obs + FOLD_REQUEST, engine.context_limit
    if limit is None:
        return message
    room = limit - engine.config.sampling.max_tokens - len(head)
    kept = None  # the observation's token count, only once a cut is needed (the usual fold fits as it is)
    for _ in range(4):  # token boundaries and the cut's marker make lengths only nearly additive: check, cut again
        excess = len(engine.chat.turn_suffix(response, message)) - room
        if excess <= 0 or kept == 0:
            return message
        kept = len(engine.chat.encode(obs)) if kept is None else kept
        kept = max(0, kept - excess - len(engine.chat.encode(TRUNCATION_MARKER.format(kept))))
        message = (engine.chat.truncate_observation(obs, kept) if kept else "") + FOLD_REQUEST
    return message


def record_summary(engine: Any, ep: Any, req: GenerationRequest, gen: Generation, generate_s: float) -> None:
    """Keep the summary as a turn (reward 0, no env step) and start the next segment from it."""
    anchor = ep.info.get("anchor")
    turn = Turn(index=len(ep.turns), observation=ep.summary_obs, action=gen.text, prompt_ids=req.prompt_ids,
                response_ids=tuple(map(int, gen.token_ids)), logprobs=tuple(map(float, gen.logprobs)), reward=0.0,
                anchor=("fold", ep.obs if anchor is None else anchor), finish_reason=gen.finish_reason,
                generate_s=generate_s, info={"fold": "summary", "success": ep.success},
                history=history_keys(ep.turns, engine.config.history_key_depth), choice=gen.choice,
                policy_version=gen.policy_version)
    ep.turns.append(turn)
    ep.summarising = False
    start_segment(engine, ep, summary_ids=list(turn.response_ids))


def start_segment(engine: Any, ep: Any, summary_ids: list[int] | None) -> None:
    """The next segment's prompt: system, fold message, the summary's ids (if any), the current observation."""
    message = fold_message(ep.task or ep.first_obs, env_state(engine.pool, ep.slot), ep.env_turns)
    if summary_ids is None:
        message = f"{message}\n\n{ep.obs}"
        ep.prompt = engine.chat.initial_prompt(ep.system, message, ep.tools)
    else:
        after = engine.chat.turn_suffix(summary_ids, ep.obs)
        ep.prompt = engine.chat.initial_prompt(ep.system, message, ep.tools) + summary_ids + after
        ep.pieces.append((summary_ids, after))
    ep.fold_message, ep.segment_turns = message, 0


def env_state(pool: Any, slot: int) -> str:
    """The env's `state_summary()`, or "" where it has none or it fails (the model's summary still stands)."""
    try:
        state = pool.call(slot, "state_summary")
    except Exception:  # a pool or wrapper without the method: folding goes on without it
        return ""
    return state if isinstance(state, str) else ""
