"""The text-env contract: `TextEnv` and `ToolEnv`.

A `TextEnv` is a `gymnasium.Env[str, str]`: observations and actions are text, `step` takes the raw
model output of one turn, and every step returns a turn-level reward. The standard `info` keys are:

    success            bool   the task is solved
    valid_action       bool   the action parsed and was admissible
    anchor             hashable key of the state acted from next (GiGPO groups on it); default: obs text
    reward_components  dict[str, float] summing to `reward`
    admissible_actions list[str] (where the env has them)
    task_id            str
    tool_results       list[ToolResult] (ToolEnv)

Any string is a legal action: bad input gives an observation that says what was wrong,
`valid_action=False`, and never an exception.
"""
from __future__ import annotations

from typing import Any, Hashable, Sequence

import gymnasium as gym

from agentgym.spaces import Text
from agentgym.toolcall_formats import ToolCall, get_format, looks_like_call
from agentgym.toolcalls import Tool, ToolResult, extract_tag, parse_tool_calls, run_tool

INFO_KEYS = ("success", "valid_action", "anchor", "reward_components", "admissible_actions", "task_id",
             "tool_results")
MAX_TEXT = 1_000_000


def make_info(*, success: bool = False, valid_action: bool = True, anchor: Hashable | None = None,
              reward_components: dict[str, float] | None = None, admissible_actions: Sequence[str] | None = None,
              task_id: str | None = None, observation: str | None = None, **extra: Any) -> dict[str, Any]:
    """An info dict with the standard keys. The anchor defaults to `observation` when that is given;
    otherwise `anchor=None` is filled with the observation by `TextEnv.finish_info` or the rollout."""
    if anchor is None:
        anchor = observation
    info: dict[str, Any] = {"success": bool(success), "valid_action": bool(valid_action), "anchor": anchor,
                            "reward_components": dict(reward_components or {})}
    if admissible_actions is not None:
        info["admissible_actions"] = list(admissible_actions)
    if task_id is not None:
        info["task_id"] = task_id
    info.update(extra)
    return info


class TextEnv(gym.Env[str, str]):
    """Base class of every agentgym environment.

    Subclasses implement `reset` and `step` as in Gymnasium, returning infos built with `make_info`,
    and may override `instructions` (the system prompt) and `tools`.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi", "human"]}
    observation_space = Text(MAX_TEXT)
    action_space = Text(MAX_TEXT)
    # attributes that hold the episode's state: listing them gives the env snapshot() / restore()
    snapshot_fields: tuple[str, ...] = ()
    reward_range: tuple[float, float] | None = None
    """[lo, hi] of one step's reward where the env can say (the trainer's reward_sanity guardrail checks it);
    an env whose rewards follow its kwargs sets it in __init__. None: undeclared."""

    @property
    def instructions(self) -> str:
        """The system prompt: what the task is and how to act."""
        return ""

    @property
    def tools(self) -> list[Tool]:
        """The tools the model may call (their schemas go into the system prompt)."""
        return []

    def oracle_action(self) -> str | None:
        """An action that makes progress towards the goal, where the env knows one (for `OraclePolicy`)."""
        return None

    def state_summary(self) -> str:
        """A few lines on where the episode stands (room, inventory, files changed, ...), shown in place of
        the turns a `fold` layout folds away; "" = nothing to say (the model's own summary then carries it)."""
        return ""

    def render(self) -> str | None:
        return getattr(self, "_last_obs", None)

    # ------------------------------------------------------------------ optional: snapshots
    def supports_snapshot(self) -> bool:
        """Whether `snapshot` / `restore` work (an env with `snapshot_fields`, or one that overrides both)."""
        return bool(self.snapshot_fields) or type(self).snapshot is not TextEnv.snapshot

    def snapshot(self) -> bytes:
        """The episode's state as bytes: a restored env answers the same actions with the same
        observations and rewards. Pickles `snapshot_fields` (and the seeded generator) by default."""
        if not self.snapshot_fields:
            raise NotImplementedError(f"{type(self).__name__} does not support snapshots")
        from agentgym.snapshot import pickle_fields

        return pickle_fields(self, ("_last_obs", *self.snapshot_fields))

    def restore(self, data: bytes) -> None:
        """Go back to the state `snapshot()` returned (from this instance or another of the same class)."""
        if not self.snapshot_fields:
            raise NotImplementedError(f"{type(self).__name__} does not support snapshots")
        from agentgym.snapshot import unpickle_fields

        unpickle_fields(self, data)

    def close(self) -> None:
        pass

    @staticmethod
    def finish_info(obs: str, info: dict[str, Any]) -> dict[str, Any]:
        """Fill defaults the contract requires: anchor = observation text, components present."""
        if info.get("anchor") is None:
            info["anchor"] = obs
        info.setdefault("reward_components", {})
        info.setdefault("success", False)
        info.setdefault("valid_action", True)
        return info


class ToolEnv(TextEnv):
    """A `TextEnv` whose actions are tool calls.

    `step` parses calls from the action (Hermes `<tool_call>` blocks by default, OpenAI JSON too),
    runs each with a time limit and returns their outputs as the observation. An `<answer>` tag or a
    call to a tool named in `final_tools` ends the episode. `reset(options={"tool_format": NAME})` makes
    NAME (a format of `agentgym.toolcall_formats`: the policy's own, the rollout passes it) the first
    format tried, before the class's `tool_formats`. A turn that attempts a call in some format but
    parses to none says so in its observation and in `info["unparsed_tool_call"]` (the format it
    looks like); `info["tool_format"]` is the format the env reads first. Subclasses implement:

        reset_task(seed, options) -> (obs, info)
        tool_list() -> list[Tool]
        score(action, results, answer) -> (reward_components, terminated, success)
    """

    tool_formats: tuple[str, ...] = ("hermes", "openai")
    tool_timeout_s: float = 10.0
    max_calls_per_turn: int = 8
    final_tools: tuple[str, ...] = ("answer", "submit")

    def __init__(self) -> None:
        self._tools_by_name: dict[str, Tool] | None = None
        self._formats: tuple[str, ...] | None = None

    @property
    def active_tool_formats(self) -> tuple[str, ...]:
        """The formats `step` tries, in order: the one set at reset (if any), then the class's own."""
        return getattr(self, "_formats", None) or tuple(self.tool_formats)

    # ------------------------------------------------------------------ for subclasses
    def tool_list(self) -> list[Tool]:
        raise NotImplementedError

    def reset_task(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError

    def score(self, action: str, results: list[ToolResult], answer: str | None
              ) -> tuple[dict[str, float], bool, bool]:
        raise NotImplementedError

    # ------------------------------------------------------------------ the contract
    @property
    def tools(self) -> list[Tool]:
        return self.tool_list()

    def _tool_map(self) -> dict[str, Tool]:
        if self._tools_by_name is None:
            self._tools_by_name = {t.name: t for t in self.tool_list()}
        return self._tools_by_name

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        chosen = options.pop("tool_format", None)  # each reset sets it afresh: none given, the class's own
        self._formats = None
        if chosen:
            name = get_format(str(chosen)).name  # an unknown name is a ConfigError naming the known ones
            self._formats = (name, *(f for f in self.tool_formats if f != name))
        obs, info = self.reset_task(seed, options)
        self._last_obs = obs
        return obs, self.finish_info(obs, info)

    def step(self, action: str):
        action = action if isinstance(action, str) else str(action)
        answer = extract_tag(action, "answer")
        tools, formats = self._tool_map(), self.active_tool_formats
        calls = parse_tool_calls(action, formats, {n: t.parameters for n, t in tools.items()})
        results = [run_tool(tools, c, self.tool_timeout_s, formats[0]) for c in calls[: self.max_calls_per_turn]]
        if len(calls) > self.max_calls_per_turn:
            results.append(ToolResult("?", f"Error: at most {self.max_calls_per_turn} tool calls per turn; "
                                      f"{len(calls) - self.max_calls_per_turn} were ignored.", False))
        for result in results:
            if result.ok and result.name in self.final_tools and answer is None:
                answer = str(result.arguments.get(next(iter(result.arguments), ""), result.output))
        valid = (bool(results) and all(r.ok for r in results)) or (answer is not None and not results)
        components, terminated, success = self.score(action, results, answer)
        unparsed = looks_like_call(action) if not calls else None
        if not results and answer is None:
            obs = self.no_call_message() if unparsed is None else self.unparsed_message(unparsed)
        else:
            obs = "\n".join(self.format_result(r) for r in results) or "Answer received."
        self._last_obs = obs
        extra = {"unparsed_tool_call": unparsed} if unparsed else {}
        info = make_info(success=success, valid_action=valid, reward_components=components,
                         tool_results=results, tool_format=formats[0], **extra)
        reward = float(sum(components.values()))
        return obs, reward, terminated, False, self.finish_info(obs, info)

    def format_result(self, result: ToolResult) -> str:
        return f"<tool_response>\n{result.output}\n</tool_response>"

    def _example_call(self) -> str:
        tools = self.tool_list()
        return tools[0].usage(self.active_tool_formats[0]) if tools else "<answer>...</answer>"

    def render_calls(self, calls: Sequence[tuple[str, dict[str, Any]]]) -> str:
        """`(name, arguments)` calls written in the format this env reads first (oracles and demos use it)."""
        return get_format(self.active_tool_formats[0]).render_calls([ToolCall(n, dict(a)) for n, a in calls])

    def call_hint(self) -> str:
        """A sentence for instructions: how to call a tool in the format this env reads first."""
        return f"Call a tool like this (several calls per turn are allowed): {self._example_call()}"

    def no_call_message(self) -> str:
        fmt = self.active_tool_formats[0]
        if fmt == "hermes":
            return ("No tool call found. Call a tool with a JSON object inside <tool_call></tool_call> tags, "
                    f"e.g. {self._example_call()}, or give your final answer as <answer>...</answer>.")
        return (f"No tool call found. Call a tool in the {fmt} format, e.g. {self._example_call()}, or give your "
                "final answer as <answer>...</answer>.")

    def unparsed_message(self, looks_like: str) -> str:
        """The observation for a turn that attempts a call (in the `looks_like` format) that parses to none."""
        return (f"Your reply looks like a tool call in the {looks_like} format, but no call could be read from it "
                f"(this env reads {', '.join(self.active_tool_formats)}). Write the call exactly like: "
                f"{self._example_call()}")
