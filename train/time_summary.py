"""Where a run's time went, as console lines, from the metrics.jsonl files the SFT stage and the trainer
write (train/sft/run.py, train/updaters/cost.py): the quick start prints them after its phase times.

    from agentgym.train.time_summary import time_lines
    print("\n".join(time_lines("runs/quickstart/train")))    # RUN_DIR/train, with RUN_DIR/train/sft inside

Pure reading and arithmetic; a file or figure that is missing is left out.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

from agentgym.train.updaters.cost import PHASES


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _total(records: Iterable[dict[str, Any]], key: str) -> float:
    return float(sum(r.get(key) or 0.0 for r in records))


def sft_lines(records: list[dict[str, Any]]) -> list[str]:
    """SFT: demo building, the frozen trunk (once), the optimizer steps and their tokens/s."""
    data = next((r for r in records if r.get("phase") == "data"), {})
    trunk = next((r for r in records if r.get("phase") == "trunk"), {})
    steps = [r for r in records if r.get("phase") == "train"]
    if not steps:
        return []
    train_s = _total(steps, "time/train")
    tokens = sum((r.get("tokens_per_s/train") or 0.0) * (r.get("time/train") or 0.0) for r in steps)
    return [f"SFT: demos {data.get('time/data', 0.0):.0f} s ({data.get('samples', '?')} demos, "
            f"{data.get('tokens', 0) / max(data.get('samples', 1), 1):.0f} conversation tokens each); "
            f"frozen trunk once {trunk.get('time/trunk', 0.0):.0f} s ({trunk.get('trunk_layers', 0)} layers); "
            f"{len(steps)} steps {train_s:.0f} s ({train_s / len(steps):.1f} s a step, "
            f"{tokens / max(train_s, 1e-9):.0f} conversation tokens/s)"]


def rl_lines(records: list[dict[str, Any]]) -> list[str]:
    """RL: per iteration, the rollout and the update split into its phases (train/updaters/cost.py's PHASES),
    with the update's tokens/s and GFLOP/s (dense-attention FLOPs)."""
    out: list[str] = []
    for r in records:
        if "time/rollout" not in r:
            continue
        parts = [f"{k} {r[f'time/update_{k}']:.0f}" for k in PHASES if r.get(f"time/update_{k}")]
        update = f"update {r.get('time/train', 0.0):.0f} s" + (f" ({', '.join(parts)})" if parts else "")
        rate = ""
        if "tokens_per_s/update" in r:
            rate = (f"; {r['tokens_per_s/update']:.0f} update tokens/s, {r.get('gflops_per_s/update', 0.0):.0f} "
                    f"GFLOP/s, {r.get('update/tokens_per_sequence', 0.0):.0f} tokens an episode")
        out.append(f"RL iteration {r.get('iteration', len(out))}: rollout {r['time/rollout']:.0f} s, {update}{rate}")
    return out


def time_lines(train_dir: str | Path) -> list[str]:
    """The SFT stage's (train_dir/sft) and the RL trainer's (train_dir) time lines."""
    train_dir = Path(train_dir)
    return sft_lines(_records(train_dir / "sft" / "metrics.jsonl")) + rl_lines(_records(train_dir / "metrics.jsonl"))
