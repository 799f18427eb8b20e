"""A soup of RL runs (`train.soup_runs: K`): K independent runs from one start, each with its own seeds, played
side by side as processes, whose final weights are averaged into the run's checkpoint.

Why: one RL run from a warm start is a lottery over its few training episodes, and runs differ in which tasks
they fix; an average of their weights can keep what they share and dilute what each got wrong by chance
(averaging fine-tuned weights from one start: model soups, Wortsman et al. 2022; WARP's merge of RL runs, Rame et
al. 2024). Measured on the household quick start (docs/results/learning.md, "Soups of RL runs"): a pair of
8-iteration runs averaged scores about one task above its members; at the preset's episode budget two 3-iteration
runs averaged score less than one 6-iteration run, so the preset does not use it. Processes, not threads: two
one-thread runs on two cores play 1.10x the episodes a minute of one two-thread run (benchmarks/soup_throughput.py).

Member k trains `train.seed + 1000 k` from `rollout.seed_start + k x 10^8` in RUN_DIR/soup/run-k (member 0 is the
plain run of the same config); RUN_DIR gets the averaged checkpoint (`latest` -> ckpt-N, as a plain run's) and a
metrics.jsonl whose rows are the members' per-iteration means (so curves and time summaries read as one run's).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from agentgym.errors import AgentGymError

SEED_STRIDE = 1000
ROLLOUT_SEED_STRIDE = 100_000_000  # member k's tasks start far past every other member's (and the eval's 10^6)
WEIGHTS = "model.safetensors"


class SoupError(AgentGymError):
    """A member run failed, or its weights cannot be averaged with the others'."""


def member_overrides(config: Any, k: int, threads: int) -> dict[str, dict[str, Any]]:
    """What member k changes in the soup's config: its seeds, run dir and threads; it is a plain run (no soup,
    no SFT stage: the policy already names the warm start)."""
    return {
        "train": {"seed": config.train.seed + SEED_STRIDE * k, "run_dir": str(member_dir(config, k)),
                  "torch_threads": threads, "soup_runs": 1},
        "rollout": {"seed_start": config.rollout.seed_start + ROLLOUT_SEED_STRIDE * k},
        "sft": {"enabled": False},
    }


def member_dir(config: Any, k: int) -> Path:
    return Path(config.train.run_dir) / "soup" / f"run-{k}"


def member_threads(torch_threads: int, members: int, cpus: int) -> int:
    """Each member's share of the threads (0 = all cores, as torch's default): at least one."""
    return max(1, (torch_threads or cpus) // members)


def average(weights: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The uniform average of several state dicts naming the same tensors (summed in float64, returned in each
    tensor's dtype); tensors equal in every member come back bit for bit."""
    if not weights:
        raise SoupError("average needs at least one member's weights")
    names = set(weights[0])
    for i, w in enumerate(weights[1:], 1):
        if set(w) != names:
            raise SoupError(f"member {i} names other tensors than member 0: {sorted(set(w) ^ names)[:3]}")
    out = {}
    for name, first in weights[0].items():
        if not first.is_floating_point():
            out[name] = first.clone()
            continue
        total = sum(w[name].double() for w in weights)
        out[name] = (total / len(weights)).to(first.dtype)
    return out


def mean_rows(members: Sequence[Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Per iteration, the mean of the members' numeric figures (the iterations every member reached)."""
    rows = []
    for per_member in zip(*members):
        row: dict[str, Any] = {"soup_members": len(per_member)}
        for key, value in per_member[0].items():
            values = [r.get(key) for r in per_member]
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                row[key] = sum(values) / len(values)
            elif all(v == value for v in values):
                row[key] = value
        row["iteration"] = per_member[0].get("iteration")
        rows.append(row)
    return rows


def train_soup(config: Any) -> Path:
    """Run the members (resuming any already started), then write the averaged checkpoint; returns the run dir."""
    from agentgym.train.checkpoint import refuse_an_earlier_run

    run_dir = Path(config.train.run_dir)
    members = config.train.soup_runs
    threads = member_threads(config.train.torch_threads, members, os.cpu_count() or 1)
    for folder in [run_dir, *(member_dir(config, k) for k in range(members))]:
        refuse_an_earlier_run(folder, config.checkpoint.resume)  # before any member starts, not in its log
    done = _soup_done(run_dir, config.train.iterations)
    if done is not None:
        print(f"soup: {done} already averages {members} runs of {config.train.iterations} iterations")
        return run_dir
    procs = [_start_member(config, k, threads) for k in range(members)]
    print(f"soup: {members} RL runs side by side, {threads} thread(s) each, in {run_dir / 'soup'}", flush=True)
    try:
        codes = [proc.wait() for proc, _ in procs]
    finally:  # an interrupted parent takes its members down (checkpoint.resume=auto continues them)
        for proc, _ in procs:
            if proc.poll() is None:
                proc.terminate()
    failed = [(k, procs[k][1], rc) for k, rc in enumerate(codes) if rc != 0]
    if failed:
        k, log, rc = failed[0]
        raise SoupError(f"soup member {k} failed (exit code {rc}): {_last_line(log)} (log: {log}); fix it and run "
                        "again with checkpoint.resume=auto to continue the members")
    _write_soup(config, run_dir, members)
    return run_dir


def _start_member(config: Any, k: int, threads: int) -> tuple[subprocess.Popen, Path]:
    import yaml

    from agentgym.train.config import config_from_dict
    from agentgym.train.config_loader import plain_values

    folder = member_dir(config, k)
    folder.mkdir(parents=True, exist_ok=True)
    data = config.to_dict()
    for section, values in member_overrides(config, k, threads).items():
        data[section] = {**data.get(section, {}), **values}
    data = plain_values(data)
    config_from_dict(data)  # a member's config is valid before it starts
    member_yaml = folder.parent / f"run-{k}.yaml"
    member_yaml.write_text(yaml.safe_dump(data, sort_keys=False))
    log = folder.parent / f"run-{k}.log"
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    with open(log, "ab") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "agentgym", "train", str(member_yaml)],
                                stdout=fh, stderr=subprocess.STDOUT, env=env)
    return proc, log


def _write_soup(config: Any, run_dir: Path, members: int) -> Path:
    """Average the members' final weights into RUN_DIR/ckpt-N (checkpoint.write_checkpoint: written whole, then
    `latest` moves), after their metrics' per-iteration means into RUN_DIR/metrics.jsonl."""
    import torch
    from safetensors.torch import load_file, save_file

    from agentgym.train import checkpoint as ck
    from agentgym.train.metrics import read_metrics

    iterations = config.train.iterations
    model_dirs = [_final_model_dir(config, k, iterations) for k in range(members)]
    souped = average([load_file(str(d / WEIGHTS)) for d in model_dirs])

    def fill(tmp: Path) -> None:
        (tmp / "model").mkdir()
        for f in model_dirs[0].iterdir():  # config, tokenizer, chat template: the same in every member
            if f.is_file() and f.name != WEIGHTS:
                shutil.copy2(f, tmp / "model" / f.name)
        save_file({k: v.contiguous() for k, v in souped.items()}, str(tmp / "model" / WEIGHTS),
                  metadata={"format": "pt"})
        torch.save({"iteration": iterations, "soup_of": [str(d) for d in model_dirs]}, tmp / "trainer.pt")

    rows = mean_rows([read_metrics(member_dir(config, k)) for k in range(members)])
    ck.write_atomically(run_dir / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    ckpt = ck.write_checkpoint(run_dir, iterations, fill, keep=0)
    print(f"soup: averaged {members} runs' weights into {ckpt}", flush=True)
    return ckpt


def _final_model_dir(config: Any, k: int, iterations: int) -> Path:
    folder = member_dir(config, k)
    latest = folder / "latest"
    name = latest.read_text().strip() if latest.is_file() else ""
    if name != f"ckpt-{iterations}" or not (folder / name / "model" / WEIGHTS).is_file():
        raise SoupError(f"soup member {k} has no final checkpoint ckpt-{iterations} in {folder} (latest: {name or 'none'}); "
                        "run again with checkpoint.resume=auto to finish it")
    return folder / name / "model"


def _soup_done(run_dir: Path, iterations: int) -> Path | None:
    latest = run_dir / "latest"
    if latest.is_file() and latest.read_text().strip() == f"ckpt-{iterations}":
        ckpt = run_dir / f"ckpt-{iterations}"
        return ckpt if (ckpt / "model" / WEIGHTS).is_file() else None
    return None


def _last_line(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()] if log.is_file() else []
    return lines[-1][:300] if lines else "(no output)"
