"""Peak memory and time of one HF `generate` call over many long prompts, by generation token budget.

    python benchmarks/generation_memory.py                                  # 32 x 1,024-token prompts
    python benchmarks/generation_memory.py --prompts 64 --prompt-tokens 1536 --budgets none 32768

Why: an evaluation sends all its episodes' prompts in one call; the web shop's 64 goals of ~1,500 tokens in one
batch held ~11 GB (the KV cache and the prefill's attention grow with rows x length). `HFPolicy`'s
`max_batch_tokens` cuts a call into batches of at most that many padded tokens. Each budget runs in a fresh
child process (its peak RSS is its own), on the same prompts (random token ids, seeded, so no two share a
prefix), greedy; the rows' token ids are compared across budgets (they must be equal).
"""
from __future__ import annotations

import argparse
import multiprocessing
import resource
import time


def _run(model: str, budget: int | None, prompts: int, length: int, new: int, threads: int, queue) -> None:
    import torch

    from agentgym.policies.base import GenerationRequest, SamplingParams
    from agentgym.policies.hf import HFPolicy

    torch.set_num_threads(threads)
    policy = HFPolicy.from_pretrained(model, device="cpu", max_batch_tokens=budget, prefix_cache_mb=0)
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    vocab = policy.model.get_input_embeddings().num_embeddings
    generator = torch.Generator().manual_seed(0)
    requests = [GenerationRequest(tuple(torch.randint(100, vocab, (length,), generator=generator).tolist()),
                                  SamplingParams(temperature=0, max_tokens=new)) for _ in range(prompts)]
    batches: list[int] = []
    decode = policy._decode_loop
    policy._decode_loop = lambda rows: (batches.append(len(rows)), decode(rows))[1]  # type: ignore[method-assign]
    start = time.perf_counter()
    outputs = policy.generate(requests)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    queue.put((seconds, loaded, peak, batches, [o.token_ids for o in outputs]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--prompt-tokens", type=int, default=1024)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--budgets", nargs="+", default=["none", "32768", "16384"],
                        help="max_batch_tokens values to compare ('none': the row cap of 64 alone)")
    args = parser.parse_args()
    try:
        budgets = [None if b == "none" else int(b) for b in args.budgets]
    except ValueError:
        parser.error(f"--budgets takes whole numbers or 'none', got {args.budgets}")
    context = multiprocessing.get_context("spawn")
    print(f"{args.prompts} prompts x {args.prompt_tokens} tokens, {args.new_tokens} new tokens each, greedy, "
          f"{args.threads} thread(s)")
    print(f"{'max_batch_tokens':>16} {'batches':>16} {'seconds':>8} {'RSS loaded GB':>13} {'peak RSS GB':>11}")
    reference = None
    for budget in budgets:
        queue = context.Queue()
        child = context.Process(target=_run, args=(args.model, budget, args.prompts, args.prompt_tokens,
                                                   args.new_tokens, args.threads, queue))
        child.start()
        seconds, loaded, peak, batches, tokens = queue.get()
        child.join()
        same = "" if reference is None else ("  same tokens" if tokens == reference else "  TOKENS DIFFER")
        reference = reference or tokens
        shown = "x".join(str(b) for b in batches) if len(batches) <= 4 else f"{len(batches)} of <={max(batches)}"
        print(f"{str(budget):>16} {shown:>16} {seconds:8.1f} {loaded:13.2f} {peak:11.2f}{same}")


if __name__ == "__main__":
    main()
