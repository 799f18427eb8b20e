"""`agentgym/MCP-v0`: train or evaluate an agent on your own MCP server with no Python subclass.

    env = agentgym.make("agentgym/MCP-v0", server="python my_server.py",
                        tasks=[{"question": "What is the capital of Peru?", "answer": "Lima"}])
    env = agentgym.make("agentgym/MCP-v0", config="my_mcp_env.yaml")   # the same keys in a YAML file

The env starts (stdio) or connects to (HTTP) the server, offers the model every tool the server lists
plus an `answer` tool, and ends the episode on a final answer, graded by the task's checker against its
reference: `outcome` = `correct_reward` × score (or `wrong_reward`). An optional `rubric` (see
`agentgym.rubric`) adds named components when the episode terminates (to score episodes cut by the
turn limit too, wrap the env in `agentgym/Rubric-v0` instead). A server that dies mid-episode
ends that episode as a failure (`info["error"]` says why) and is restarted on the next reset. The env
owns the server process; `close()` stops it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from agentgym.core import ToolEnv, make_info
from agentgym.errors import ConfigError
from agentgym.rubric import Episode, Rubric, Step
from agentgym.toolcalls import Tool, ToolResult
from agentgym.tools.mcp import MCPServerSpec, MCPToolset, mcp_tools
from agentgym.envs.mcp.tasks import MCPTask, grade, load_tasks

DEFAULT_INSTRUCTIONS = (
    "Solve the task using the tools of the connected server. When you know the answer, give it with the answer "
    "tool or as <answer>...</answer>; that ends the task.")
_CONFIG_KEYS = {"server", "tasks", "checker", "correct_reward", "wrong_reward", "call_timeout_s",
                "startup_timeout_s", "include_tools", "exclude_tools", "instructions", "rubric",
                "max_calls_per_turn"}


def load_config(path: str | Path) -> tuple[dict[str, Any], Path]:
    """The env's kwargs from a YAML file; relative task files and the server's working dir follow the file."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"MCP env config {str(path)!r} does not exist")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"MCP env config {str(path)!r} is not valid YAML: {str(exc).splitlines()[0]}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"MCP env config {str(path)!r} must be a mapping with `server:` and `tasks:`")
    unknown = sorted(set(data) - _CONFIG_KEYS)
    if unknown:
        raise ConfigError(f"MCP env config {str(path)!r}: unknown key(s) {unknown}; allowed: "
                          f"{', '.join(sorted(_CONFIG_KEYS))}")
    return data, path.parent.resolve()


class MCPEnv(ToolEnv):
    """A question-answering env whose tools come from an MCP server (see the module docstring)."""

    def __init__(self, server: Any = None, tasks: Any = None, config: str | None = None, checker: str = "normalized",
                 correct_reward: float = 1.0, wrong_reward: float = 0.0, call_timeout_s: float = 30.0,
                 startup_timeout_s: float = 60.0, include_tools: Sequence[str] | None = None,
                 exclude_tools: Sequence[str] = (), instructions: str | None = None, rubric: Any = None,
                 max_calls_per_turn: int = 8):
        super().__init__()
        base_dir = None
        if server is None and tasks is None and config is None:
            from agentgym.envs.mcp import DEMO_CONFIG

            config = str(DEMO_CONFIG)  # no arguments: the bundled demo server and its questions
        if config is not None:  # the file's values replace the defaults; explicit server/tasks win
            values, base_dir = load_config(config)
            server = server if server is not None else values.get("server")
            tasks = tasks if tasks is not None else values.get("tasks")
            checker = values.get("checker", checker)
            correct_reward = float(values.get("correct_reward", correct_reward))
            wrong_reward = float(values.get("wrong_reward", wrong_reward))
            call_timeout_s = float(values.get("call_timeout_s", call_timeout_s))
            startup_timeout_s = float(values.get("startup_timeout_s", startup_timeout_s))
            include_tools = include_tools if include_tools is not None else values.get("include_tools")
            exclude_tools = tuple(exclude_tools) or tuple(values.get("exclude_tools") or ())
            instructions = instructions or values.get("instructions")
            rubric = rubric if rubric is not None else values.get("rubric")
            max_calls_per_turn = int(values.get("max_calls_per_turn", max_calls_per_turn))
        if server is None or tasks is None:
            raise ConfigError("agentgym/MCP-v0 needs `server` (a stdio command or an http(s) URL) and `tasks` "
                              "(a list of {question, answer} or a task file), or `config: FILE.yaml` with both")
        self.spec_server = MCPServerSpec.parse(server, call_timeout_s=call_timeout_s,
                                               startup_timeout_s=startup_timeout_s)
        if base_dir is not None and self.spec_server.command and self.spec_server.cwd is None:
            self.spec_server = MCPServerSpec.parse(self.spec_server, cwd=str(base_dir))  # `python server.py` works
        self.tasks = load_tasks(tasks, checker, base_dir)
        self.correct_reward, self.wrong_reward = correct_reward, wrong_reward
        self.include_tools = None if include_tools is None else tuple(include_tools)
        self.exclude_tools = tuple(exclude_tools)
        self._instructions = instructions or ""
        self.rubric = None if rubric is None else Rubric.from_config(rubric)
        self.max_calls_per_turn = max_calls_per_turn
        self.task: MCPTask = self.tasks[0]
        self._toolset: MCPToolset | None = None
        self._answer_tool = Tool(self._answer, name="answer")
        self._steps: list[Step] = []
        self._reset_info: dict[str, Any] = {}
        self._checker_error: str | None = None
        self._connect()

    # ------------------------------------------------------------------ the server
    def _connect(self) -> None:
        self._toolset = mcp_tools(self.spec_server, include=self.include_tools, exclude=self.exclude_tools)
        self._tools_by_name = None

    def _answer(self, text: str) -> str:
        """Give the final answer; the episode ends.

        Args:
            text: The answer.
        """
        return "Answer received."

    def tool_list(self) -> list[Tool]:
        served = list(self._toolset or ())
        if any(t.name in self.final_tools for t in served):
            return served  # the server's own answer/submit tool ends the episode
        return [*served, self._answer_tool]

    @property
    def instructions(self) -> str:  # the default says how to call a tool in the model's own format
        return self._instructions or f"{DEFAULT_INSTRUCTIONS} {self.call_hint()}"

    def close(self) -> None:
        if self._toolset is not None:
            self._toolset.close()
            self._toolset = None

    # ------------------------------------------------------------------ tasks
    def _pool(self, split: str | None) -> tuple[MCPTask, ...]:
        splits = sorted({t.split for t in self.tasks if t.split is not None})
        if not splits or split is None:
            return self.tasks
        pool = tuple(t for t in self.tasks if t.split == split or t.split is None)
        if not pool:
            raise ConfigError(f"no MCP task in split {split!r}; the task list has splits {', '.join(splits)}")
        return pool

    def reset_task(self, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if self._toolset is None or self._toolset.dead:  # a dead server is replaced by a fresh one
            self.close()
            self._connect()
        if options.get("task_id") is not None:
            chosen = [t for t in self.tasks if t.id == str(options["task_id"])]
            if not chosen:
                raise ConfigError(f"no MCP task with id {options['task_id']!r}")
            self.task = chosen[0]
        else:
            pool = self._pool(options.get("split"))
            index = int(self.np_random.integers(len(pool))) if seed is None else seed % len(pool)
            self.task = pool[index]
        self._steps = []
        self._reset_info = make_info(task_id=self.task.id, anchor=("task", self.task.id), task=self.task.question,
                                     reference=self.task.answers[0] if self.task.answers else None)
        return self.task.question, dict(self._reset_info)

    # ------------------------------------------------------------------ scoring
    def score(self, action: str, results: list[ToolResult], answer: str | None
              ) -> tuple[dict[str, float], bool, bool]:
        if self._toolset is not None and self._toolset.dead:
            return {"outcome": self.wrong_reward}, True, False
        if answer is None:
            return {}, False, False
        score, self._checker_error = grade(answer, self.task)
        outcome = self.correct_reward * score if score > 0 else self.wrong_reward
        return {"outcome": outcome}, True, score >= 1.0

    def step(self, action: str):
        self._checker_error = None
        obs, reward, terminated, truncated, info = super().step(action)
        dead = self._toolset.dead if self._toolset is not None else "closed"
        if dead:
            info["error"] = f"the MCP server died: {dead}"
            obs += "\nThe tool server stopped working; this episode is over."
            self._last_obs = obs
        if self._checker_error:
            info["checker_error"] = self._checker_error
        self._steps.append(Step(action if isinstance(action, str) else str(action), obs, reward, info))
        if terminated and self.rubric is not None:
            episode = Episode(self.task.question, self.instructions, tuple(self._steps), self._reset_info,
                              bool(info.get("success")))
            scored = self.rubric.score(episode)
            for name, value in scored.components.items():
                info["reward_components"][f"rubric/{name}" if name in info["reward_components"] else name] = value
            reward = float(sum(info["reward_components"].values()))
            info["rubric_scores"] = scored.raw
            if scored.errors:
                info["rubric_errors"] = scored.errors
        return obs, reward, terminated, truncated, info

    def oracle_action(self) -> str | None:
        turn = len(self._steps)
        if turn < len(self.task.oracle):
            step = self.task.oracle[turn]
            return step if isinstance(step, str) else self.render_calls([step])
        if self.task.answers:
            return f"<answer>{self.task.answers[0]}</answer>"
        return None
