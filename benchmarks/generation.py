"""HF policy: batched vs one-by-one generation tokens/s, side by side in one run (target: batched >= 4x).

    python benchmarks/generation.py                      # 16 prompts, 32 new tokens, SmolLM2-135M
    python benchmarks/generation.py --prompts 32 --threads 0   # torch's default thread count

Both modes run the same greedy requests, so they generate exactly the same tokens (checked); only the
wall time differs. Batched = one `generate` call with all prompts (left padding + KV cache, finished rows
dropped); one-by-one = one call per prompt. The model is loaded once and warmed up before timing.
"""
from __future__ import annotations

import argparse
import time

QUESTIONS = [
    "What is the capital of France?", "Name three primary colours.", "How do I boil an egg?",
    "Write a haiku about the sea.", "What is 12 times 7?", "Explain photosynthesis briefly.",
    "Give me a synonym for happy.", "What does a key open?", "Describe a cat in one sentence.",
    "Why is the sky blue?", "List two uses of a hammer.", "What is the opposite of cold?",
    "Translate 'hello' into Spanish.", "Who wrote Hamlet?", "What do bees make?", "Suggest a name for a dog.",
]


def _prompts(tokenizer, n: int) -> list[tuple[int, ...]]:
    return [tuple(tokenizer.apply_chat_template([{"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]
                                                  + (f" (#{i})" if i >= len(QUESTIONS) else "")}],
                                                add_generation_prompt=True, return_dict=False))
            for i in range(n)]


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def bench_generation(n_prompts: int = 16, max_tokens: int = 32, threads: int | None = 1,
                     model: str = "smollm2-135m-instruct", repeats: int = 1) -> dict[str, float]:
    """Print and return batched vs one-by-one tokens/s of the HF policy (greedy, same tokens both ways)."""
    import torch

    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        return _run(model, n_prompts, max_tokens, repeats)
    finally:
        torch.set_num_threads(before)


def _run(model: str, n_prompts: int, max_tokens: int, repeats: int) -> dict[str, float]:
    import torch

    from agentgym.policies.base import GenerationRequest, SamplingParams
    from agentgym.policies.hf import HFPolicy

    policy, load_s = _timed(lambda: HFPolicy.from_pretrained(model, max_batch_size=max(n_prompts, 1)))
    sampling = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    requests = [GenerationRequest(p, sampling) for p in _prompts(policy.tokenizer, n_prompts)]
    policy.generate(requests[:2])  # warm-up: first-call allocations are not generation speed
    best_batched, best_single = float("inf"), float("inf")
    for _ in range(repeats):
        batched, t_batched = _timed(lambda: policy.generate(requests))
        single, t_single = _timed(lambda: [policy.generate([r])[0] for r in requests])
        best_batched, best_single = min(best_batched, t_batched), min(best_single, t_single)
    same = all(a.token_ids == b.token_ids for a, b in zip(batched, single))
    tokens = sum(len(g.token_ids) for g in batched)
    result = {
        "model": model, "device": str(policy.device), "torch_threads": torch.get_num_threads(),
        "prompts": n_prompts, "max_tokens": max_tokens, "generated_tokens": tokens, "load_s": load_s,
        "batched_s": best_batched, "one_by_one_s": best_single,
        "batched_tokens_per_s": tokens / best_batched, "one_by_one_tokens_per_s": tokens / best_single,
        "speedup": best_single / best_batched, "same_tokens": same,
    }
    _print(result)
    return result


def _print(r: dict) -> None:
    print(f"model {r['model']} on {r['device']}, torch threads {r['torch_threads']}, loaded in {r['load_s']:.1f}s")
    print(f"{r['prompts']} prompts x up to {r['max_tokens']} new tokens (greedy): {r['generated_tokens']} tokens"
          f", identical both ways: {r['same_tokens']}")
    print(f"{'mode':<12}{'seconds':>10}{'tokens/s':>12}")
    print(f"{'batched':<12}{r['batched_s']:>10.2f}{r['batched_tokens_per_s']:>12.1f}")
    print(f"{'one-by-one':<12}{r['one_by_one_s']:>10.2f}{r['one_by_one_tokens_per_s']:>12.1f}")
    verdict = "meets" if r["speedup"] >= 4 else "MISSES"
    print(f"speedup batched / one-by-one: {r['speedup']:.2f}x ({verdict} the >= 4x target)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16, help="number of concurrent prompts")
    parser.add_argument("--max-tokens", type=int, default=32, help="new tokens per prompt")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads; 0 = torch's default (on a small shared CPU, extra OpenMP threads "
                             "spin against other processes and can be several times slower)")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="model spec (as for hf:MODEL)")
    parser.add_argument("--repeats", type=int, default=1, help="best of this many timings per mode")
    args = parser.parse_args(argv)
    bench_generation(args.prompts, args.max_tokens, args.threads, args.model, args.repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
