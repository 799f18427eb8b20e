"""`check_env`'s context-budget warnings: does an env's episode fit the context settings it declares?

An env declares its horizon and budgets at registration (`agentgym.horizon.ContextDefaults`); without one
the engine's defaults apply. This plays one episode's first turns (the oracle's actions where it has them,
else the checker's) and warns, without failing the check, when
  - the first observation, or a typical (median) one, is over the declared observation budget;
  - the first prompt (system + tools + first observation + one turn's tokens) does not fit the context;
  - an episode of `horizon` typical turns would not fit the declared layout (trajectory: the whole episode;
    step: the history window; fold: the fold budget must hold the task and two turns).
Tokens are counted as UTF-8 bytes (ChatFormat.simple(), what the oracle and scripted policies use): the worst
case of any tokenizer; a BPE tokenizer counts about 3-4x fewer.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable

from agentgym.horizon import CONTEXT_FIELDS, choose, context_defaults

TURN_TOKENS = 256      # one turn's generation budget (the engine's default max_tokens)
ACTION_TOKENS = 32     # a typical action, for the estimate of a turn's size


@dataclass(frozen=True)
class EpisodeSizes:
    """Token counts of the start of one episode."""

    system: int                  # system prompt (+ tool schemas)
    first: int                   # first observation
    turns: tuple[int, ...]       # each later observation


def budget_warnings(sizes: EpisodeSizes, settings: dict[str, Any], horizon: int | None) -> list[str]:
    """The warnings for an episode of these sizes under these settings (pure)."""
    out = []
    budget, context = settings.get("max_observation_tokens"), settings.get("max_context_tokens")
    typical = int(statistics.median(sizes.turns)) if sizes.turns else 0
    if budget is not None and sizes.first > budget:
        out.append(f"the first observation is {sizes.first} tokens, over the declared observation budget of {budget}: "
                   "it will be cut (raise max_observation_tokens, or shorten the observation)")
    if budget is not None and typical > budget:
        out.append(f"a typical observation is {typical} tokens, over the declared observation budget of {budget}")
    if context is None:
        return out
    first = sizes.system + min(sizes.first, budget or sizes.first)
    turn = min(typical, budget or typical) + ACTION_TOKENS
    if first + TURN_TOKENS > context:
        out.append(f"the first prompt ({first} tokens) and one turn ({TURN_TOKENS}) do not fit the {context}-token "
                   "context: raise max_context_tokens or cut the first observation")
    layout, turns = settings.get("layout") or "trajectory", horizon or 0
    if layout == "trajectory" and first + turns * turn > context:
        out.append(f"an episode of {turns} typical turns (~{turn} tokens each) needs ~{first + turns * turn} tokens, "
                   f"over the {context}-token context: register layout='fold' or 'step', or a smaller horizon")
    elif layout == "step" and first + (settings.get("history_turns") or 0) * turn + TURN_TOKENS > context:
        out.append(f"the step layout's window of {settings.get('history_turns')} turns (~{turn} tokens each) does not "
                   f"fit the {context}-token context")
    elif layout == "fold":
        fold_at = settings.get("fold_at_tokens") or context * 3 // 4
        if first + 2 * turn + TURN_TOKENS > fold_at:
            out.append(f"the fold budget of {fold_at} tokens holds fewer than two turns after the task ({first} "
                       "tokens): folding cannot keep the episode going; raise max_context_tokens")
    return out


def measure(env: Any, seed: int, steps: int, pick: Callable[[Any, dict], str]) -> EpisodeSizes:
    """Play `steps` turns from reset(seed) (the oracle's actions where it knows one) and count their tokens."""
    from agentgym.chat import ChatFormat

    chat = ChatFormat.simple()
    obs, info = env.reset(seed=seed)
    system = len(chat.encode(chat.system_text(getattr(env, "instructions", "") or "", getattr(env, "tools", None))))
    first, turns = len(chat.encode(obs)), []
    for _ in range(steps):
        oracle = getattr(env, "oracle_action", None)
        action = (oracle() if callable(oracle) else None) or pick(env, info)
        obs, _, terminated, truncated, info = env.step(action)
        turns.append(len(chat.encode(obs)))
        if terminated or truncated:
            break
    return EpisodeSizes(system, first, tuple(turns))


def check_context_budget(env: Any, env_id: str, seed: int, steps: int,
                         pick: Callable[[Any, dict], str]) -> tuple[str, ...]:
    """[context budget] warnings (empty when the env fits what it declares; see the module docstring)."""
    from agentgym.engine.rollout import RolloutConfig

    engine = RolloutConfig()
    settings = choose(env_id, {}, {name: getattr(engine, name) for name in CONTEXT_FIELDS})
    sizes = measure(env, seed, steps, pick)
    return tuple(f"[context budget] {w}" for w in budget_warnings(sizes, settings, context_defaults(env_id).horizon))
