"""Free-text RL with rollouts on the vLLM CPU engine beside the same run on HF generation, in one run.

    python benchmarks/vllm_training.py                          # household_cpu_vllm, 2 iterations each
    python benchmarks/vllm_training.py --iterations 4 --out B rollout.groups=4
    python benchmarks/vllm_training.py --preset household_cpu_vllm --skip-vllm     # the HF run alone
    python benchmarks/vllm_training.py --preset web_shop_text_cpu --checkpoint R/sft/ckpt-61 --iterations 3 --merged

Runs `agentgym train PRESET` twice, one after the other (each alone on the machine), from the same weights with
the same seed: once with the preset's `vllm:` policy (weights pushed to the engine after every update), once
with `model.policy` set to the same model on HF generation. `--checkpoint DIR` starts both from a warm start
(`vllm:checkpoint:DIR` and `checkpoint:DIR`, the preset's SFT stage off), so a preset whose policy is not `vllm:`
(web_shop_text_cpu) can be compared too; `--merged` adds a third run for a LoRA preset, the engine without LoRA
layers and the adapter merged into the weights it is pushed (`model.vllm.lora_push=merged`). Extra `key=value`
arguments go to every run.

Prints, per iteration and run: the rollout's seconds (of which generation), the update's seconds, the weight
push's, the episodes, the iteration's response tokens, tokens/s of generation, training success and the
valid-action rate; then the runs' whole wall times (the engine's start included) and the ratio HF / each vLLM
run of seconds per iteration. Only the iterations after the first are compared (the first pays the engine's
compile and warm-up).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

FIELDS = [("time/rollout", "rollout s"), ("time/generate", "generate s"), ("time/train", "update s"),
          ("time/push_weights", "push s"), ("episodes_trained", "episodes"), ("response_tokens", "response tokens"),
          ("tokens_per_s/generate", "gen tok/s"), ("success", "success"), ("valid_action_rate", "valid")]


def run(preset: str, run_dir: Path, overrides: list[str]) -> float:
    """One `agentgym train` in a child process; returns its wall seconds (start-up and engine start included)."""
    command = [sys.executable, "-P", "-m", "agentgym", "train", preset, f"train.run_dir={run_dir}", *overrides]
    print("$", " ".join(command), f"  (load average {os.getloadavg()[0]:.1f})", flush=True)
    started = time.perf_counter()
    with open(run_dir.with_suffix(".log"), "w") as log:
        code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - started
    if code != 0:
        sys.exit(f"the run failed (exit {code}); its log: {run_dir.with_suffix('.log')}")
    return wall


def iterations(run_dir: Path) -> list[dict]:
    """The run's training iterations' rows of metrics.jsonl (not eval-only rows)."""
    from agentgym.train.metrics import read_metrics

    return [r for r in read_metrics(run_dir) if "time/rollout" in r]


def iteration_seconds(row: dict) -> float:
    return sum(float(row.get(k, 0.0)) for k in ("time/rollout", "time/train", "time/push_weights"))


def table(name: str, rows: list[dict]) -> None:
    print(f"\n{name}")
    print("| iteration | " + " | ".join(label for _, label in FIELDS) + " | iteration s |")
    print("|" + "---|" * (len(FIELDS) + 2))
    for row in rows:
        cells = []
        for key, _ in FIELDS:
            value = row.get(key)
            cells.append("-" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value))
        print(f"| {row.get('iteration')} | " + " | ".join(cells) + f" | {iteration_seconds(row):.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="household_cpu_vllm")
    parser.add_argument("--hf-policy", default="hf:smollm2-135m-instruct",
                        help="the HF run's model.policy (the preset's model without the vllm: prefix)")
    parser.add_argument("--checkpoint", help="both runs start from this checkpoint (the SFT stage off)")
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--out", default="runs/vllm_training")
    parser.add_argument("--skip-vllm", action="store_true")
    parser.add_argument("--skip-hf", action="store_true")
    parser.add_argument("--merged", action="store_true",
                        help="a LoRA preset: also the vLLM run with model.vllm.lora_push=merged (merged weights pushed)")
    parser.add_argument("overrides", nargs="*", help="key=value for both runs")
    args = parser.parse_args()
    if args.iterations < 2:
        parser.error("--iterations must be >= 2: the first iteration pays the engine's warm-up and is not compared")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    common = [f"train.iterations={args.iterations}", *args.overrides]
    vllm_policy: list[str] = []
    hf_policy = [f"model.policy={args.hf_policy}"]
    if args.checkpoint:
        common.append("sft.enabled=false")
        vllm_policy = [f"model.policy=vllm:checkpoint:{args.checkpoint}"]
        hf_policy = [f"model.policy=checkpoint:{args.checkpoint}"]
    runs = []
    if not args.skip_vllm:
        runs.append(("vllm", [*vllm_policy, *common]))
    if args.merged:
        runs.append(("vllm-merged", [*vllm_policy, "model.vllm.lora_push=merged", *common]))
    if not args.skip_hf:
        runs.append(("hf", [*hf_policy, *common]))
    walls, results = {}, {}
    for name, overrides in runs:
        run_dir = out / name
        walls[name] = run(args.preset, run_dir, overrides)
        results[name] = iterations(run_dir)
        table(f"{name} ({args.preset}), whole run {walls[name]:.0f} s wall", results[name])
    mean_seconds = {}  # per run: seconds an iteration after the first
    print()
    for name, rows in results.items():
        seconds = [iteration_seconds(r) for r in rows[1:]]
        if not seconds:
            print(f"{name}: one iteration only, nothing to compare")
            continue
        mean_seconds[name] = sum(seconds) / len(seconds)
        episodes = sum(r.get("episodes_trained", 0) for r in rows[1:])
        print(f"{name}: iterations 2..{len(rows)}: {mean_seconds[name]:.1f} s an iteration, "
              f"{60 * episodes / sum(seconds):.1f} episodes a minute; whole run {walls[name]:.0f} s")
    for name in (n for n in mean_seconds if n != "hf" and "hf" in mean_seconds):
        print(f"HF / {name} seconds per iteration (after the first): {mean_seconds['hf'] / mean_seconds[name]:.2f}x")


if __name__ == "__main__":
    main()
