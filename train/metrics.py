"""Per-iteration metrics: rollout statistics (pure) and the writers (JSON lines, tensorboard, wandb, tqdm).

run_dir/metrics.jsonl holds one JSON object per iteration (and per evaluation, with "eval/" keys);
this is always written. Tensorboard and wandb are optional and imported only when asked for.
"""
from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from agentgym.errors import AgentGymError
from agentgym.trajectory import Trajectory


class LogWriteError(AgentGymError):
    """A run's log file could not be appended to (a full disk); the message names the file and what to resume."""


def append_lines(path: Path, lines: Sequence[str]) -> None:
    """Append whole lines to one of the run's logs. A failed write (a full disk) is cut back to the lines that
    were there, so no torn line is left, and stops the run with one line naming the file and the last good
    checkpoint (the checkpoint's own disk-full wording)."""
    data = "".join(line + "\n" for line in lines).encode()
    with path.open("ab", buffering=0) as f:  # unbuffered: nothing is left to fail again at close
        start = os.fstat(f.fileno()).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[f.write(view) or 0:]
        except OSError as exc:
            from agentgym.train.checkpoint import write_failure

            _cut_back(f, start)
            raise LogWriteError(write_failure(path.parent, f"{path.name} ({path})", exc)) from exc


def _cut_back(f: Any, size: int) -> None:
    """Drop what a failed write left past `size` (best effort: truncating frees space, so it usually works)."""
    try:
        f.truncate(size)
    except OSError:
        pass


def rollout_metrics(trajectories: Sequence[Trajectory], prefix: str = "") -> dict[str, float]:
    """success, return, turns, valid-action rate, tool-call rate, response tokens of a batch, and
    `reward/<component>`: each reward component's total per episode, averaged over the batch."""
    if not trajectories:
        return {}
    turns = [t for tr in trajectories for t in tr.turns]
    n_turns = max(len(turns), 1)
    out = {
        "success": float(np.mean([tr.outcome == "success" for tr in trajectories])),
        "return": float(np.mean([tr.total_reward for tr in trajectories])),
        "turns": float(np.mean([tr.num_turns for tr in trajectories])),
        "valid_action_rate": sum(t.valid for t in turns) / n_turns,
        "tool_call_rate": sum(t.tool_calls > 0 for t in turns) / n_turns,
        "response_tokens": float(sum(len(t.response_ids) for t in turns)),
        "failed_episodes": float(sum(tr.outcome == "error" for tr in trajectories)),
        "overlong_rate": sum(t.finish_reason == "length" for t in turns) / n_turns,
        **tool_call_stats(turns),
        **reward_component_means(trajectories),
    }
    return {prefix + k: v for k, v in out.items()}


def infra_figures(first: Sequence[Trajectory], stats: dict[str, Any]) -> dict[str, float]:
    """Episodes an infrastructure failure ended (outcome "error": an env server, a sandbox, a policy request),
    counted apart from the agent's failures: how many in the iteration's first round and their share (the
    infra_failures guard's figure), and the groups dropped because too few plays were left (`stats`: the
    collector's counts over all its rounds)."""
    failed = sum(t.outcome == "error" for t in first)
    return {"infra/failed_episodes": float(failed), "infra/failed_share": failed / len(first) if first else 0.0,
            "infra/dropped_groups": float(stats.get("groups_dropped_after_failures", 0.0))}


def reward_component_means(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """`reward/<name>`: the sum of a component over an episode's turns, averaged over all episodes (0 for an
    episode that never got it), so a shaping term's share of the return is visible next to `return`."""
    totals: dict[str, float] = {}
    for turn in (t for tr in trajectories for t in tr.turns):
        for name, value in turn.reward_components.items():
            totals[name] = totals.get(name, 0.0) + value
    return {f"reward/{name}": total / len(trajectories) for name, total in sorted(totals.items())}


def tool_call_stats(turns: Sequence[Any]) -> dict[str, float]:
    """For turns in tool envs (ToolEnv records `tool_format` in each turn's info): the share of turns that
    attempt a call but parse to none, overall and per format the text looks like (`tool_calls_unparsed/X`),
    the share per format the env read with (`tool_format/Y`)."""
    tool_turns = [t for t in turns if "tool_format" in t.info]
    if not tool_turns:
        return {}
    n = len(tool_turns)
    out: dict[str, float] = {"tool_calls_unparsed": sum("unparsed_tool_call" in t.info for t in tool_turns) / n}
    for key, name in ((t.info.get("unparsed_tool_call"), "tool_calls_unparsed") for t in tool_turns):
        if key:
            out[f"{name}/{key}"] = out.get(f"{name}/{key}", 0.0) + 1 / n
    for t in tool_turns:
        out[f"tool_format/{t.info['tool_format']}"] = out.get(f"tool_format/{t.info['tool_format']}", 0.0) + 1 / n
    return out  # the share of failed calls is health.rollout_health's tool_error_share


def write_rollouts(run_dir: Path, iteration: int, trajectories: Sequence[Trajectory], limit: int = 4) -> None:
    """Append a few episodes (actions, rewards, validity) to run_dir/rollouts.jsonl for reading by eye."""
    append_lines(run_dir / "rollouts.jsonl", [
        json.dumps({"iteration": iteration, "env": t.env_id, "seed": t.seed, "group": t.group_id,
                    "success": t.success, "return": t.total_reward, "end": t.end_reason,
                    "first_observation": t.first_observation[:2000],
                    "turns": [{"action": k.action[:2000], "reward": k.reward, "valid": k.valid,
                               "policy_version": k.policy_version} for k in t.turns]})
        for t in trajectories[:limit]])


def _clean(value: Any) -> Any:
    if isinstance(value, (np.floating, np.integer)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsWriter:
    """JSON lines always; tensorboard/wandb when enabled; a tqdm bar with ETA on a terminal."""

    def __init__(self, run_dir: Path, total: int, start: int = 0, tensorboard: bool = False, wandb: bool = False,
                 wandb_project: str = "agentgym", config: dict[str, Any] | None = None, progress: bool = True):
        self.path = run_dir / "metrics.jsonl"
        self._tb = self._wandb = self._bar = None
        if tensorboard:
            from agentgym.errors import require

            tb = require("torch.utils.tensorboard", "tensorboard")
            self._tb = tb.SummaryWriter(str(run_dir / "tensorboard"))
        if wandb:
            try:
                import wandb as wandb_module
            except ImportError as exc:
                from agentgym.errors import ConfigError

                raise ConfigError("logging.wandb=true needs wandb: pip install wandb (or set logging.wandb=false)"
                                  ) from exc
            self._wandb = wandb_module
            self._wandb.init(project=wandb_project, config=config or {}, dir=str(run_dir))
        self._lines = progress and not sys.stderr.isatty()  # a log line per iteration instead of a bar
        if progress and sys.stderr.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total, initial=start, desc="train", unit="it", dynamic_ncols=True)
        self.total = total

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        record = {"iteration": step, **{k: _clean(v) for k, v in metrics.items()}}
        append_lines(self.path, [json.dumps(record)])
        numeric = {k: v for k, v in record.items() if isinstance(v, (int, float)) and k != "iteration"}
        if self._tb is not None:
            for k, v in numeric.items():
                self._tb.add_scalar(k, v, step)
        if self._wandb is not None:
            self._wandb.log(numeric, step=step)
        if self._lines and "success" in metrics:
            extra = f" eval/success {metrics['eval/success']:.2f}" if "eval/success" in metrics else ""
            if "eval/newly_solved" in metrics:  # paired with the run's previous eval (train/eval_records.py)
                extra += (f" (since the last eval: {metrics['eval/newly_solved']:.0f} tasks newly solved, "
                          f"{metrics['eval/newly_failed']:.0f} newly failed, McNemar p {metrics['eval/paired_p']:.2g})")
            print(f"iteration {step + 1}/{self.total}: success {metrics['success']:.2f} return "
                  f"{metrics.get('return', 0):.2f} turns {metrics.get('turns', 0):.1f}{extra}", file=sys.stderr)
        if self._bar is not None and "success" in metrics:
            self._bar.update(1)
            self._bar.set_postfix(success=f"{metrics['success']:.2f}", ret=f"{metrics.get('return', 0):.2f}")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
