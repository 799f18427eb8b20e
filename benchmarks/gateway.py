"""Calls per second through the gateway vs straight to the policy, on loopback (issue 54).

    python benchmarks/gateway.py                         # the tiny model, 1 / 8 / 32 concurrent sessions
    python benchmarks/gateway.py --policy hf:smollm2-135m-instruct --max-tokens 16 --concurrency 1 8

Every session plays the same shape of conversation: a system and a user message, then `--turns` calls, each
appending the answer and a new user message (so every call after the first splices the recorded ids and
merges into one segment). Three ways to run the same calls:

  direct      one call at a time into `policy.generate`, prompts built the way the rollout engine builds
              them (`ChatFormat.initial_prompt` / `continue_prompt`): the in-process floor per call
  direct-batch  the C sessions' calls of a turn as one `policy.generate` batch: the in-process best case
  gateway     C sessions, each a thread with the official `openai` client in a separate harness process,
              over HTTP on 127.0.0.1 (the engine batches what arrives together)

It prints calls/s and mean latency per way and concurrency, the gateway's overhead per call at concurrency 1,
the batch sizes the engine formed, and the session bound: with --max-sessions S, opening S + 1 sessions gets
one 429 and the S open ones all finish.

    python benchmarks/gateway.py --learn 10              # the worked example's learning curve

--learn N trains the tiny model for N iterations on the example harness (tests/gateway/harness_keydoor.py:
the official openai client only, its own key-door game and tool loop), 4 tasks x 8 runs per iteration through
the gateway (the toy_learning preset: GiGPO, whose step groups are the calls that answered the same game
state), and prints each iteration's success, return, calls and the sampler-vs-trainer log-prob gap.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

SYSTEM = "take the key , then open the door ."
OBS = ["room 0 . key here .", "room 1 . hold key .", "room 0 . door left .", "room 1 . empty ."]


def load(spec: str, work: Path):
    from agentgym.train.gateway.cli import load

    return load(spec, str(work))


def direct(policy, chat, sessions: int, turns: int, max_tokens: int, batched: bool) -> tuple[float, float]:
    """(calls/s, mean latency s) of the calls made in-process."""
    from agentgym.policy import GenerationRequest, SamplingParams

    sampling = SamplingParams(temperature=1.0, max_tokens=max_tokens)
    prompts = [chat.initial_prompt(SYSTEM, OBS[0]) for _ in range(sessions)]
    latencies = []
    start = time.perf_counter()
    for turn in range(turns):
        if batched:
            t0 = time.perf_counter()
            gens = policy.generate([GenerationRequest(tuple(p), sampling) for p in prompts])
            latencies += [time.perf_counter() - t0] * sessions
        else:
            gens = []
            for p in prompts:
                t0 = time.perf_counter()
                gens += policy.generate([GenerationRequest(tuple(p), sampling)])
                latencies.append(time.perf_counter() - t0)
        prompts = [chat.continue_prompt(p, g.token_ids, OBS[(turn + 1) % len(OBS)]) for p, g in zip(prompts, gens)]
    took = time.perf_counter() - start
    return sessions * turns / took, statistics.mean(latencies)


def _harnesses(url: str, sids: list[str], turns: int, max_tokens: int, ready, go, out) -> None:
    """The harness side, in its own process (as a real harness is): one thread per session."""
    from openai import OpenAI

    clients = [OpenAI(base_url=url, api_key=sid, max_retries=3, timeout=300) for sid in sids]
    latencies: list[float] = []
    failures = [0]
    lock = threading.Lock()

    def run(client) -> None:
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": OBS[0]}]
        for turn in range(turns):
            t0 = time.perf_counter()
            try:
                answer = client.chat.completions.create(model="m", messages=messages, max_tokens=max_tokens)
            except Exception:
                with lock:
                    failures[0] += 1
                return
            took = time.perf_counter() - t0
            with lock:
                latencies.append(took)
            messages += [{"role": "assistant", "content": answer.choices[0].message.content},
                         {"role": "user", "content": OBS[(turn + 1) % len(OBS)]}]

    threads = [threading.Thread(target=run, args=(c,)) for c in clients]
    ready.set()
    go.wait()
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put((latencies, failures[0], time.perf_counter() - start))


def through_gateway(gateway, url: str, sessions: int, turns: int, max_tokens: int) -> tuple[float, float, int]:
    """(calls/s, mean latency s, calls that failed) with `sessions` harness threads on the openai client, in
    another process."""
    import multiprocessing

    from agentgym.train.gateway.merge import segments

    ctx = multiprocessing.get_context("spawn")
    opened = [gateway.open_session(task="bench") for _ in range(sessions)]
    ready, go, out = ctx.Event(), ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=_harnesses, args=(url, [s.id for s in opened], turns, max_tokens, ready, go, out))
    proc.start()
    ready.wait(120)   # the client process has imported openai and built its clients: not timed
    go.set()
    latencies, failures, took = out.get(timeout=600)
    proc.join(30)
    for s in opened:
        gateway.close_session(s.id, reward=0.0)
        merged = len(segments(gateway.session(s.id).calls))
        assert merged == 1, f"session {s.id} split into {merged} segments"   # every call spliced and merged
        gateway.store.pop(s.id)
    return len(latencies) / took, statistics.mean(latencies) if latencies else float("nan"), failures


def session_bound(gateway, base: str, bound: int) -> None:
    import httpx

    ids = [httpx.post(f"{base}/sessions", json={}).json()["id"] for _ in range(bound)]
    refused = httpx.post(f"{base}/sessions", json={})
    print(f"session bound: {bound} open, the next POST /v1/sessions -> {refused.status_code} "
          f"{refused.json()['error']['code']}")
    for sid in ids:
        httpx.post(f"{base}/sessions/{sid}/close", json={"reward": 0})
        gateway.store.pop(sid)


def learn(iterations: int, seed: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "gateway"))
    from harness_keydoor import play

    from agentgym.train.config import load_config
    from agentgym.train.gateway.training import train_harness

    run_dir = Path(tempfile.mkdtemp(prefix="gateway-learn-")) / "run"
    config = load_config("toy_learning", [f"train.iterations={iterations}", f"train.run_dir={run_dir}", "eval.every=0",
                                          "rollout.layout=trajectory", "train.verify_tokens=false", "rollout.groups=4",
                                          "rollout.group_size=8", f"train.seed={seed}", "logging.progress=false"])
    start = time.perf_counter()
    print(f"{'iter':>4}{'success':>9}{'return':>8}{'calls':>7}{'segments':>10}{'calls/s':>9}{'|lp diff|':>11}{'s':>7}")

    def show(i: int, m: dict) -> None:
        print(f"{i:>4}{m['success']:>9.3f}{m['return']:>8.3f}{m['gateway/calls']:>7.0f}"
              f"{m['gateway/segments_per_session']:>10.2f}{m['gateway/calls_per_s']:>9.1f}{m['logprob_diff']:>11.2e}"
              f"{time.perf_counter() - start:>7.0f}", flush=True)

    # seeded calls: each sample depends on the weights alone, not on which calls share its batch
    train_harness(config, lambda run: play(run.base_url, run.api_key, run.task, seed=run.seed * 100 + run.sample)["reward"],
                  lambda task_seed: {"seed": task_seed, "max_turns": 8}, workers=8, on_step=show)
    print(f"run dir {run_dir}")


class ZeroCost:
    """An engine that answers at once (one fixed token + end of turn): what is left is the gateway's own cost
    per call (HTTP, the openai client, sessions, prompt building, recording)."""

    def __init__(self, chat):
        self.ids = (*chat.encode("left"), *chat.eos_token_ids[:1])

    def generate(self, requests):
        from agentgym.policy import Generation

        return [Generation(self.ids, "left", tuple(-0.5 for _ in self.ids), "stop") for _ in requests]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", default="tiny:keydoor")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3, help="each figure is the median of this many runs")
    parser.add_argument("--max-sessions", type=int, default=64)
    parser.add_argument("--learn", type=int, default=0, metavar="N", help="train N iterations instead (see above)")
    parser.add_argument("--seed", type=int, default=0, help="--learn: train.seed")
    args = parser.parse_args()
    if args.learn:
        learn(args.learn, args.seed)
        return
    import torch

    torch.set_num_threads(1)
    from agentgym.train.gateway import Gateway, GatewayConfig, GatewayServer

    work = Path(tempfile.mkdtemp(prefix="gateway-bench-"))
    policy, chat = load(args.policy, work)
    if max(args.concurrency) > args.max_sessions:
        sys.exit(f"--concurrency {max(args.concurrency)} is more than --max-sessions {args.max_sessions}")
    gateway = Gateway(policy, chat, GatewayConfig(max_new_tokens=args.max_tokens, max_sessions=args.max_sessions,
                                                  max_batch=max(args.concurrency)))
    direct(policy, chat, 2, 2, args.max_tokens, False)   # warm-up
    print(f"policy {args.policy}, {args.turns} calls per session, max_tokens {args.max_tokens}, median of "
          f"{args.repeats} runs, torch threads 1")
    print(f"{'way':<14}{'sessions':>9}{'calls/s':>10}{'latency ms':>12}")
    with GatewayServer(gateway) as server:
        through_gateway(gateway, server.url, 2, 2, args.max_tokens)   # warm-up
        rows = {}
        for c in args.concurrency:
            for way in ("direct", "direct-batch", "gateway"):
                runs = []
                for _ in range(args.repeats):
                    if way == "gateway":
                        before = (gateway.engine.batches, gateway.engine.rows)
                        rate, lat, failed = through_gateway(gateway, server.url, c, args.turns, args.max_tokens)
                        if failed:
                            print(f"  {failed} gateway calls failed at {c} sessions")
                        batches = gateway.engine.batches - before[0]
                        mean_batch = (gateway.engine.rows - before[1]) / max(1, batches)
                    else:
                        rate, lat = direct(policy, chat, c, args.turns, args.max_tokens, way == "direct-batch")
                    runs.append((rate, lat))
                rate = statistics.median(r for r, _ in runs)
                lat = statistics.median(lt for _, lt in runs)
                rows[(way, c)] = (rate, lat)
                extra = f"   mean engine batch {mean_batch:.1f}" if way == "gateway" else ""
                print(f"{way:<14}{c:>9}{rate:>10.1f}{lat * 1000:>12.2f}{extra}", flush=True)
        if 1 in args.concurrency:
            overhead = rows[("gateway", 1)][1] - rows[("direct", 1)][1]
            print(f"gateway overhead per call at 1 session: {overhead * 1000:.2f} ms "
                  f"({rows[('gateway', 1)][0] / rows[('direct', 1)][0]:.2f}x direct's calls/s)")
        session_bound(gateway, server.url, args.max_sessions)
    gateway.close()
    zero = Gateway(ZeroCost(chat), chat, GatewayConfig(max_new_tokens=args.max_tokens, max_sessions=args.max_sessions,
                                                       max_batch=max(args.concurrency)))
    with GatewayServer(zero) as server:
        for c in args.concurrency:
            runs = [through_gateway(zero, server.url, c, args.turns, args.max_tokens) for _ in range(args.repeats)]
            rate, lat = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
            print(f"{'gateway, zero-cost engine':<26}{c:>4} sessions {rate:>8.1f} calls/s {lat * 1000:>8.2f} ms", flush=True)
    zero.close()
    print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
