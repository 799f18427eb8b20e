"""Which envs list every action they accept: `rollout.action_mode=admissible` chooses among
`info["admissible_actions"]`, so it needs an env whose list is complete: playable as written, or templates whose
slot the policy writes.

An env class declares it with `action_listing`:
    "all"       every accepted action is listed, as it is played (household, TextWorld, ScienceWorld)
    "partial"   a list holds templates that need free text (the shop's "search[<query>]"): admissible mode
                writes their slot and chooses among the written action and the listed ones
                (agentgym/action_templates.py)
    "none"      no list: actions are free text (search queries, tool calls)
or a function of the env's kwargs returning one of those (ScienceWorld lists only with valid_actions=True).
Undeclared (third-party envs, remote ones) is not refused: only a run can tell.
"""
from __future__ import annotations

from typing import Any, Mapping

from agentgym.errors import ConfigError

LISTINGS = ("all", "partial", "none")


def action_listing(env_id: str, env_kwargs: Mapping[str, Any] | None = None) -> str | None:
    """What `env_id` (made with `env_kwargs`) declares, or None when it declares nothing. Imports the env's
    module (not its heavy dependencies) and builds nothing."""
    from gymnasium.envs.registration import load_env_creator

    from agentgym.errors import RegistrationError
    from agentgym.registration import spec

    try:
        env_spec = spec(env_id)
    except RegistrationError:  # an unknown id is refused where the env is made, with the closest ids
        return None
    entry = env_spec.entry_point
    try:
        creator = entry if callable(entry) else load_env_creator(str(entry))
    except (ImportError, AttributeError):  # a module that cannot load here: making the env will say why
        return None
    declared = getattr(creator, "action_listing", None)
    if callable(declared):
        declared = declared({**env_spec.kwargs, **dict(env_kwargs or {})})
    if declared is not None and declared not in LISTINGS:
        raise ValueError(f"{env_id}: action_listing must be one of {', '.join(LISTINGS)}, got {declared!r}")
    return declared


def check_action_mode(env_id: str, action_mode: str, env_kwargs: Mapping[str, Any] | None = None) -> None:
    """Refuse `rollout.action_mode=admissible` for an env that cannot list the actions it accepts, with the fix."""
    if action_mode != "admissible":
        return
    listing = action_listing(env_id, env_kwargs)
    if listing == "none":
        raise ConfigError(f"rollout.action_mode=admissible needs an env that lists its actions, and {env_id} takes "
                          "free text (it has no info['admissible_actions']): set rollout.action_mode=generate")
