"""Sync vs async RL side by side in one run: samples/s, idle fractions, learning per sample.

    python benchmarks/async_rl.py                 # all three parts
    python benchmarks/async_rl.py --parts tail    # (a) the simulated long tail only; also: real, duration
    python benchmarks/async_rl.py --iterations 4  # a quick look (no learning yet)

Every run trains the tiny 2-layer Llama (`toy_learning` preset: the one-word key-door env) from the same init
and seeds for the same number of iterations, so each run trains the same number of episodes.

(a) tail: a simulated long tail. The rollout policy waits a heavy-tailed time after generating each turn
    (Pareto, alpha 1.5: most turns are short, a few are very long, as a multi-turn agent's generations and
    tool calls are), requests in flight overlap as in a batching server; each env step sleeps a variable time.
    sync waits for its slowest episode every iteration, then updates while nothing is generated; async (η =
    max_staleness) has --workers rollout workers (default 2 x groups), each playing one group at a time, which
    the staleness gate allows for η >= 1: up to twice sync's episodes in flight, never more than η batches
    ahead. The last row holds async to sync's concurrency (one worker per group).
(b) real: the same without simulated waits: the HF tiny model generating in the rollout threads while the
    trainer updates a separate copy; "served" rows put the batching server (no waits) between the workers and
    the model, so requests of all workers share one generate call, as a vLLM engine would batch them.
(c) duration: a constructed env where the best action is slow (the step that solves the task sleeps): in
    finish order (the default) fast, failing groups overtake the slow, successful ones; train.batch_order=start
    (the duration-aware batch) trains groups in the order they started; staleness=correct is shown beside drop.
    Each episode's wall time is recorded (Trajectory.wall_s, async/episode_wall_s_*).

Printed per run: episodes trained per second of wall time, the trainer's idle share (waiting for a batch),
the rollout side's idle share (sync: the update's share of the wall time; async: the workers' time waiting at
the staleness gate), mean staleness, mean training success over the run and greedy eval success at the end.
"""
from __future__ import annotations

import argparse
import asyncio
import random
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any


TAIL_ENV = "bench/KeyDoor-SlowSteps-v0"
SLOW_BEST_ENV = "bench/KeyDoor-SlowBest-v0"


class LongTailPolicy:
    """A batching server in front of `inner`: requests from every episode and thread in flight go to `inner`
    together (one generate call per round, as continuous batching does), then each caller waits a
    Pareto-distributed time of its own (seeded by the request's seed, so sync and async runs draw the same wait
    for the same turn). The waits overlap; only the real generation is serialised."""

    def __init__(self, inner: Any, scale_s: float, alpha: float = 1.5, cap_s: float = 4.0):
        self.inner, self.scale_s, self.alpha, self.cap_s = inner, scale_s, alpha, cap_s
        self.model = getattr(inner, "model", None)
        self.max_context = getattr(inner, "max_context", None)
        self._pending: list[tuple[Any, Future]] = []
        self._cv = threading.Condition()
        threading.Thread(target=self._serve, name="bench-batching-server", daemon=True).start()

    def __getattr__(self, name: str) -> Any:  # update_weights, sleep, close, chat_format ... of the inner one
        return getattr(self.inner, name)

    def _serve(self) -> None:
        while True:  # a daemon thread: it ends with the process
            with self._cv:
                while not self._pending:
                    self._cv.wait()
                batch, self._pending = self._pending, []
            try:
                for (_, future), gen in zip(batch, self.inner.generate([r for r, _ in batch])):
                    future.set_result(gen)
            except Exception as exc:
                for _, future in batch:
                    future.set_exception(exc)

    def _submit(self, requests: Any) -> list[Future]:
        futures = [Future() for _ in requests]
        with self._cv:
            self._pending.extend(zip(requests, futures))
            self._cv.notify()
        return futures

    def _wait(self, requests: Any) -> float:
        waits = [min(self.cap_s, self.scale_s * random.Random(r.sampling.seed).paretovariate(self.alpha))
                 for r in requests]
        return max(waits, default=0.0)

    def generate(self, requests: Any) -> Any:
        gens = [f.result() for f in self._submit(requests)]
        time.sleep(self._wait(requests))
        return gens

    async def agenerate(self, requests: Any) -> Any:
        gens = [await asyncio.wrap_future(f) for f in self._submit(requests)]
        await asyncio.sleep(self._wait(requests))
        return gens


def register_envs(step_s: float, slow_best_s: float) -> None:
    from agentgym.envs.toy.oneword import OneWordKeyDoor
    from agentgym.registration import register

    class SlowSteps(OneWordKeyDoor):
        """Each step sleeps uniform(0, 2 step_s), drawn from the episode's seed and turn."""

        def reset(self, *, seed: int | None = None, options: Any = None):
            self._rng = random.Random(seed)
            return super().reset(seed=seed, options=options)

        def step(self, action: str):
            time.sleep(self._rng.uniform(0.0, 2 * step_s))
            return super().step(action)

    class SlowBest(OneWordKeyDoor):
        """The step that solves the task (opening the door with the key) takes `slow_best_s`; others are instant."""

        def step(self, action: str):
            out = super().step(action)
            if out[4].get("success"):
                time.sleep(slow_best_s)
            return out

    register(TAIL_ENV, SlowSteps, max_turns=8, override=True)
    register(SLOW_BEST_ENV, SlowBest, max_turns=8, override=True)


BASE = ["rollout.async_mode=true", "rollout.executor=thread", "rollout.max_inflight_batches=64",
        "algorithm.loss.tis_cap=2.0", "logging.progress=false", "eval.every=0", "train.verify_tokens=false"]


def run_one(name: str, out: Path, overrides: list[str], tail_scale_s: float | None, iterations: int
            ) -> dict[str, float]:
    """One training run; `tail_scale_s` not None puts the batching server (with that Pareto scale of waits; 0: no
    waits) between the rollout side and the model."""
    from agentgym.train.config import load_config
    from agentgym.train.metrics import read_metrics
    from agentgym.train.trainer import Trainer

    cfg = load_config("toy_learning", [f"train.run_dir={out / name}", f"train.iterations={iterations}",
                                       *BASE, *overrides])
    trainer = Trainer(cfg)
    if tail_scale_s is not None:
        if trainer.async_side is not None:
            trainer.async_side.play_policy = LongTailPolicy(trainer.async_side.policy, tail_scale_s)
        else:
            trainer.policy = LongTailPolicy(trainer.policy, tail_scale_s)
    t0 = time.perf_counter()
    try:
        trainer.run()
        wall = time.perf_counter() - t0
        if trainer.async_side is not None:
            trainer.async_side.play_policy = trainer.async_side.policy  # eval without the simulated waits
        else:
            trainer.policy = getattr(trainer.policy, "inner", trainer.policy)
        final = trainer.evaluate()["eval/success"]
    finally:
        trainer.close()
    return summarise(read_metrics(out / name), wall, final, cfg.train.rollout_workers if cfg.train.mode == "async"
                     else 0)


def summarise(metrics: list[dict[str, Any]], wall: float, final: float, workers: int) -> dict[str, float]:
    trained = sum(m["episodes_trained"] for m in metrics)  # a sample = one episode trained on
    if workers:  # async: the trainer waits in take(); the workers wait at the gate (cumulative figure)
        trainer_idle = sum(m["async/trainer_wait_s"] for m in metrics) / wall
        rollout_idle = metrics[-1]["async/gate_wait_s"] / (workers * wall)
        stale = sum(m["async/staleness_mean"] for m in metrics) / len(metrics)
    else:  # sync: each side waits while the other works
        trainer_idle = sum(m["time/rollout"] for m in metrics) / wall
        rollout_idle = sum(m["time/train"] for m in metrics) / wall
        stale = 0.0
    return {"wall_s": wall, "samples": trained, "samples_per_s": trained / wall,
            "trainer_idle": trainer_idle, "rollout_idle": rollout_idle, "staleness": stale,
            "train_success": sum(m["success"] for m in metrics) / len(metrics), "eval_success": final,
            "curve": [m["success"] for m in metrics], "dropped": sum(m.get("async/stale_dropped", 0.0) for m in metrics)}


def table(title: str, rows: dict[str, dict[str, float]], base: str) -> None:
    print(f"\n{title}")
    print(f"{'run':28s} {'wall s':>7s} {'samples':>8s} {'samples/s':>9s} {'x sync':>6s} {'trainer idle':>12s} "
          f"{'rollout idle':>12s} {'staleness':>9s} {'train succ':>10s} {'eval succ':>9s}")
    for name, r in rows.items():
        speed = r["samples_per_s"] / rows[base]["samples_per_s"] if base in rows else float("nan")
        print(f"{name:28s} {r['wall_s']:7.1f} {r['samples']:8.0f} {r['samples_per_s']:9.1f} {speed:6.2f} "
              f"{r['trainer_idle']:12.2f} {r['rollout_idle']:12.2f} {r['staleness']:9.2f} {r['train_success']:10.2f} "
              f"{r['eval_success']:9.2f}")
    print("training success per iteration (the learning curve per sample: every iteration trains the same count)")
    for name, r in rows.items():
        print(f"  {name:26s} " + " ".join(f"{x:.2f}" for x in r["curve"]) + f"   stale groups dropped {r['dropped']:.0f}")


def async_overrides(eta: int, workers: int, staleness: str = "drop") -> list[str]:
    return ["train.mode=async", f"train.max_staleness={eta}", f"train.staleness={staleness}",
            f"train.rollout_workers={workers}", "train.groups_per_rollout=1"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", nargs="+", default=["tail", "real", "duration"], choices=["tail", "real", "duration"])
    ap.add_argument("--iterations", type=int, default=12)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--tail-scale", type=float, default=0.05, help="Pareto scale of a turn's wait (s)")
    ap.add_argument("--step-s", type=float, default=0.05, help="mean env step sleep (s), long-tail part")
    ap.add_argument("--slow-best-s", type=float, default=1.5, help="sleep of the solving step (s), duration part")
    ap.add_argument("--workers", type=int, default=0, help="async rollout workers, one group each (0: 2 x groups)")
    ap.add_argument("--real-workers", type=int, default=2, help="async workers in the real run (b)")
    ap.add_argument("--real-chunk", type=int, default=4, help="groups per rollout call in the real run (b): "
                    "on a CPU the HF model generates faster in bigger batches")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="runs/bench_async_rl")
    args = ap.parse_args()
    register_envs(args.step_s, args.slow_best_s)
    workers = args.workers or 2 * args.groups
    out = Path(args.out)
    common = [f"rollout.groups={args.groups}", f"train.seed={args.seed}", "train.torch_threads=1"]
    if "tail" in args.parts:
        env = [f"rollout.env={TAIL_ENV}", *common]
        rows = {"sync": run_one("tail-sync", out, env, args.tail_scale, args.iterations)}
        for eta in (1, 2):
            rows[f"async eta={eta}"] = run_one(f"tail-async-{eta}", out, env + async_overrides(eta, workers),
                                               args.tail_scale, args.iterations)
        rows[f"async eta=2 {args.groups} workers"] = run_one("tail-async-2-fewer", out,
                                                            env + async_overrides(2, args.groups),
                                                            args.tail_scale, args.iterations)
        table(f"(a) simulated long tail: Pareto(1.5) x {args.tail_scale}s per turn, env steps U(0, {2 * args.step_s}s)",
              rows, "sync")
    if "real" in args.parts:
        rows = {"sync": run_one("real-sync", out, common, None, args.iterations)}
        for eta in (1, 2):
            real = async_overrides(eta, args.real_workers) + [f"train.groups_per_rollout={args.real_chunk}"]
            rows[f"async eta={eta}"] = run_one(f"real-async-{eta}", out, common + real, None, args.iterations)
            rows[f"async eta={eta}, served"] = run_one(f"real-async-{eta}-served", out,
                                                      common + async_overrides(eta, workers), 0.0, args.iterations)
        table(f"(b) real: HF tiny model in {args.real_workers} rollout threads ({args.real_chunk} groups a call), "
              "no simulated waits", rows, "sync")
    if "duration" in args.parts:
        env = [f"rollout.env={SLOW_BEST_ENV}", *common]
        rows = {"sync": run_one("dur-sync", out, env, None, args.iterations)}
        for staleness, order in (("drop", "finish"), ("drop", "start"), ("correct", "finish")):
            rows[f"async eta=1 {staleness} {order}"] = run_one(
                f"dur-async-{staleness}-{order}", out,
                env + async_overrides(1, workers, staleness) + [f"train.batch_order={order}"], None, args.iterations)
        table(f"(c) duration-aware: the solving step sleeps {args.slow_best_s}s", rows, "sync")


if __name__ == "__main__":
    main()
