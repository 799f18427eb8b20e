"""Training curves: success and return vs iteration from RUN_DIR/metrics.jsonl, several runs overlaid.

The trainer writes one JSON object per line. The x axis is the first of `iteration`, `iter`, `step`
present, else the row number from 1. The trainer logs `iteration` as a 0-based index while its console,
progress bar and checkpoints count from 1 ("iteration 1/3"; the checkpoint after three is ckpt-3), so
curves plot `iteration + 1`: the point at x = n is the state after n iterations, as everywhere else.
Each panel's metric is the first of its candidate keys present (flat or nested, e.g. `rollout/success`
or {"rollout": {"success": ...}}). Lines that are not JSON objects (a run killed mid-write) are skipped.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Sequence

from agentgym.errors import ConfigError, require

X_KEYS = ("iteration", "iter", "step")
X_OFFSETS = {"iteration": 1.0}  # added to the logged value: the trainer logs 0-based iteration indices
PANELS: dict[str, tuple[str, ...]] = {
    "success": ("success", "success_rate", "rollout/success", "train/success", "rollout/success_rate",
                "train/success_rate"),
    "return": ("return", "mean_return", "episode_return", "rollout/return", "train/return",
               "rollout/mean_return", "train/mean_return", "reward", "rollout/reward"),
}


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in d.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{name}/"))
        else:
            flat[name] = value
    return flat


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """Rows of RUN_DIR/metrics.jsonl (or of the file itself), nested keys flattened with '/'."""
    path = Path(run_dir)
    path = path / "metrics.jsonl" if path.is_dir() else path
    if not path.is_file():
        raise ConfigError(f"no metrics at {str(path)!r}; pass a training run dir that holds metrics.jsonl")
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict):
            rows.append(_flatten(row))
    return rows


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def series(rows: Sequence[dict[str, Any]], keys: Sequence[str]) -> tuple[str | None, list[float], list[float]]:
    """(key used, x, y) for the first candidate key that some row holds as a number."""
    key = next((k for k in keys if any(_number(r.get(k)) is not None for r in rows)), None)
    if key is None:
        return None, [], []
    xs, ys = [], []
    for i, row in enumerate(rows):
        y = _number(row.get(key))
        if y is None:
            continue
        x = next((_number(row.get(k)) + X_OFFSETS.get(k, 0.0) for k in X_KEYS if _number(row.get(k)) is not None),
                 float(i + 1))
        xs.append(x)
        ys.append(y)
    return key, xs, ys


def plot_runs(run_dirs: Sequence[str | Path], out: str | Path, metrics: Sequence[str] = ("success", "return"),
              labels: Sequence[str] | None = None) -> Path:
    """Draw one panel per metric with every run overlaid; returns the PNG path."""
    require("matplotlib", "plot")
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    labels = list(labels or [Path(d).name or str(d) for d in run_dirs])
    if len(labels) != len(run_dirs):
        raise ConfigError(f"got {len(labels)} labels for {len(run_dirs)} runs; give one label per run")
    runs = [(label, read_metrics(d)) for label, d in zip(labels, run_dirs)]
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.5 * len(metrics), 4), squeeze=False)
    drawn = 0
    for ax, metric in zip(axes[0], metrics):
        candidates = PANELS.get(metric, (metric,))
        for label, rows in runs:
            key, xs, ys = series(rows, candidates)
            if key is not None:
                ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.5, label=label)
                drawn += 1
        ax.set_title(metric)
        ax.set_xlabel("iteration")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
        if metric == "success":
            ax.set_ylim(-0.02, 1.02)
        if ax.lines:
            ax.legend(fontsize=8)
    if not drawn:
        plt.close(fig)
        raise ConfigError(f"none of the runs has any of the metrics {list(metrics)} in metrics.jsonl; "
                          "pass --metric KEY with a key the trainer logs")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
