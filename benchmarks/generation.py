"""Generation tokens/s: the HF policy and vLLM (CPU build) batched vs llama.cpp one by one, in one run.

    python benchmarks/generation.py                         # both scenarios, 1 thread each, SmolLM2-135M
    python benchmarks/generation.py --vllm --threads 2      # plus the vLLM engine's rows (starts in ~1-2 min)
    python benchmarks/generation.py --scenario chat --prompts 32 --max-tokens 32
    python benchmarks/generation.py --scenario episodes --episodes 8 --turns 4 --threads 2

Targets: batched generation (HF, issue 17; vLLM, issue 23) >= 4x llama.cpp's one-by-one tokens/s on the
same prompts.

Scenarios (greedy, the same token ids go to every engine):
  chat      N single-turn chat prompts x M new tokens (the issue's first measurement).
  episodes  E multi-turn episodes in the trajectory layout: a ~300-token system prompt + task, then each
            turn's prompt is the previous prompt + the generated ids + a new observation, as a CPU rollout
            sends them. Each turn is one batched `generate` over all episodes.
Rows:
  hf batched          all speed-ups (in-place KV buffer, prefix store: earlier turns and shared prompts reused)
  hf batched, plain   transformers' DynamicCache, no prefix store (the policy before these speed-ups)
  hf one-by-one       one request per call, all speed-ups
  hf batched bf16     (--bf16) a bf16 copy of the weights: not exact for training (logprobs are not fp32's)
  vllm batched        (--vllm) the in-process vLLM engine (`VLLMPolicy`, fp32, prefix caching), one call
  vllm one-by-one     (--vllm) the same engine, one request per call; its worker runs --threads OpenMP threads
  llama.cpp 1-by-1    llama-cpp-python (the build tests/policies/test_openai_server.py serves) in process,
                      n_threads = --threads, one request at a time; it keeps the KV of its last sequence
Each row starts with an empty prefix store, so no row profits from another's work. Wall seconds are
what a user waits; CPU seconds (this process, all threads) are steadier on a shared machine, but miss
vLLM's work, which runs in its engine's processes (its tok/cpu-s column is blank). `ttft s` is the time to
the first token of one request (its prompt not cached).
"""
from __future__ import annotations

import argparse
import copy
import os
import time
from dataclasses import dataclass

QUESTIONS = [
    "What is the capital of France?", "Name three primary colours.", "How do I boil an egg?",
    "Write a haiku about the sea.", "What is 12 times 7?", "Explain photosynthesis briefly.",
    "Give me a synonym for happy.", "What does a key open?", "Describe a cat in one sentence.",
    "Why is the sky blue?", "List two uses of a hammer.", "What is the opposite of cold?",
    "Translate 'hello' into Spanish.", "Who wrote Hamlet?", "What do bees make?", "Suggest a name for a dog.",
]
SYSTEM = (
    "You are an agent in a household. Each turn you read what you observe and answer with exactly one "
    "command, nothing else. Commands: go to RECEPTACLE; open RECEPTACLE; close RECEPTACLE; take OBJECT from "
    "RECEPTACLE; put OBJECT in/on RECEPTACLE; examine THING; look; inventory. Receptacles are numbered, "
    "like drawer 2 or countertop 1; objects are numbered too, like mug 1. You can carry one object at a "
    "time. A closed receptacle must be opened before you can see or take what is inside it. Visit the "
    "places where the object is likely to be, one after another, and open the closed ones. When you see "
    "the object, take it, go to the target receptacle and put it there. Invalid commands waste a turn and "
    "the episode ends after a fixed number of turns, so be brief and precise. Answer with the command only."
)
ROOMS = ["cabinet 1", "drawer 2", "countertop 1", "fridge 1", "shelf 3", "sinkbasin 1", "microwave 1", "desk 1"]


@dataclass
class Row:
    name: str
    wall_s: float
    cpu_s: float
    generated: int
    prompt_tokens: int
    ttft_s: float = float("nan")
    in_process: bool = True  # False: the work runs in other processes, which process_time does not see

    @property
    def tokens_per_s(self) -> float:
        return self.generated / self.wall_s if self.wall_s else 0.0

    @property
    def tokens_per_cpu_s(self) -> float:
        return self.generated / self.cpu_s if self.cpu_s and self.in_process else float("nan")


def _chat_ids(tokenizer, system: str | None, user: str) -> list[int]:
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False))


class HFEngine:
    def __init__(self, policy, name: str, one_by_one: bool = False):
        self.policy, self.name, self.one_by_one = policy, name, one_by_one

    def run(self, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
        from agentgym.policies.base import GenerationRequest, SamplingParams

        sampling = SamplingParams(temperature=0.0, max_tokens=max_tokens)
        requests = [GenerationRequest(tuple(p), sampling) for p in prompts]
        if self.one_by_one:
            gens = [self.policy.generate([r])[0] for r in requests]
        else:
            gens = self.policy.generate(requests)
        return [list(g.token_ids) for g in gens]

    def reset(self) -> None:
        if hasattr(self.policy, "clear_prefix_cache"):
            self.policy.clear_prefix_cache()
        else:  # vLLM: drop the engine's cached prefix blocks
            self.policy.llm.reset_prefix_cache()


class LlamaEngine:
    name = "llama.cpp 1-by-1"

    def __init__(self, gguf: str, threads: int, n_ctx: int):
        from llama_cpp import Llama

        self.llm = Llama(model_path=gguf, n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads,
                         n_batch=512, verbose=False)
        self.eos = self.llm.token_eos()
        self.run([[1, 2, 3]], 2)  # warm-up: graph allocation and weight repacking are not generation speed

    def run(self, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
        outs = []
        for prompt in prompts:
            tokens: list[int] = []
            for token in self.llm.generate(prompt, temp=0.0, top_k=1, top_p=1.0, repeat_penalty=1.0):
                tokens.append(int(token))
                if token == self.eos or len(tokens) >= max_tokens:
                    break
            outs.append(tokens)
        return outs

    def reset(self) -> None:
        self.llm.reset()


def _timed(engine, fn) -> tuple[object, float, float]:
    engine.reset()
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def time_to_first_token(engine, prompt: list[int]) -> float:
    _, wall, _ = _timed(engine, lambda: engine.run([prompt], 1))
    return wall


def run_chat(engine, tokenizer, n: int, max_tokens: int) -> tuple[Row, list[list[int]]]:
    prompts = [_chat_ids(tokenizer, None, QUESTIONS[i % len(QUESTIONS)] + (f" (#{i})" if i >= len(QUESTIONS) else ""))
               for i in range(n)]
    ttft = time_to_first_token(engine, _chat_ids(tokenizer, SYSTEM, QUESTIONS[0]))
    outs, wall, cpu = _timed(engine, lambda: engine.run(prompts, max_tokens))
    return Row(engine.name, wall, cpu, sum(map(len, outs)), sum(map(len, prompts)), ttft,
               getattr(engine, "in_process", True)), outs


def run_episodes(engine, tokenizer, episodes: int, turns: int, max_tokens: int) -> tuple[Row, list[list[int]]]:
    """Trajectory-layout episodes: each turn's prompt extends the last by its response and an observation."""
    tasks = [f"Your task is to: put a mug {i} in {ROOMS[i % len(ROOMS)]}. You are in the middle of a room. "
             f"Around you are {', '.join(ROOMS)}." for i in range(episodes)]

    from agentgym.chat import ChatFormat

    chat = ChatFormat.from_tokenizer(tokenizer)  # the rollout's own prompt code

    def play() -> tuple[list[list[int]], int]:
        prompts = [chat.initial_prompt(SYSTEM, task) for task in tasks]
        outs: list[list[int]] = [[] for _ in range(episodes)]
        prompt_tokens = 0
        for turn in range(turns):
            prompt_tokens += sum(map(len, prompts))
            answers = engine.run(prompts, max_tokens)
            for e, answer in enumerate(answers):
                outs[e] += answer
                seen = f"You arrive at {ROOMS[(e + turn) % len(ROOMS)]}. On it you see a book {turn}, a pen {e}."
                prompts[e] = prompts[e] + answer + chat.turn_suffix(answer, seen)
        return outs, prompt_tokens

    (outs, prompt_tokens), wall, cpu = _timed(engine, play)
    return Row(engine.name, wall, cpu, sum(map(len, outs)), prompt_tokens,
               in_process=getattr(engine, "in_process", True)), outs


def _load_avg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def _print(title: str, rows: list[Row], same: dict[str, str]) -> None:
    print(f"\n{title}   (load average {_load_avg()} on {os.cpu_count()} CPUs)")
    print(f"{'engine':<20}{'wall s':>9}{'cpu s':>9}{'generated':>11}{'prompt tok':>12}{'tok/s':>9}{'tok/cpu-s':>11}"
          f"{'ttft s':>9}  same tokens as hf batched")
    for r in rows:
        print(f"{r.name:<20}{r.wall_s:>9.2f}{r.cpu_s:>9.2f}{r.generated:>11}{r.prompt_tokens:>12}"
              f"{r.tokens_per_s:>9.1f}{r.tokens_per_cpu_s:>11.1f}{r.ttft_s:>9.3f}  {same.get(r.name, '')}")
    by = {r.name: r for r in rows}
    for top in ("hf batched", "vllm batched"):
        for ref in ("llama.cpp 1-by-1", "hf one-by-one", "hf batched, plain", "hf batched"):
            base = by.get(top)
            if not base or ref == top or ref not in by or not by[ref].tokens_per_s:
                continue
            wall = base.tokens_per_s / by[ref].tokens_per_s
            verdict = ("meets" if wall >= 4 else "MISSES") + " the >= 4x target" if ref.startswith("llama") else ""
            print(f"{top} / {ref}: {wall:.2f}x tokens/s  {verdict}")


def bench_generation(n_prompts: int = 16, max_tokens: int = 32, threads: int | None = 1,
                     model: str = "smollm2-135m-instruct", repeats: int = 1, scenario: str = "both",
                     episodes: int = 8, turns: int = 4, turn_tokens: int = 20, llama: bool = True,
                     bf16: bool = False, vllm: bool = False) -> dict:
    """Print the side-by-side tables; returns the chat scenario's figures (and `speedup` batched/one-by-one)."""
    import torch

    from agentgym.policies.hf import HFPolicy
    from agentgym.policies.models import embedded_gguf_path, resolve_model

    before = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        start = time.perf_counter()
        fast = HFPolicy.from_pretrained(model, device="cpu", max_batch_size=max(n_prompts, episodes, 1))
        load_s = time.perf_counter() - start
        plain = HFPolicy(fast.model, fast.tokenizer, max_batch_size=fast.max_batch_size, prefix_cache_mb=0,
                         growing_cache=False)
        engines = [HFEngine(fast, "hf batched"), HFEngine(plain, "hf batched, plain"),
                   HFEngine(fast, "hf one-by-one", one_by_one=True)]
        if bf16:  # a bf16 copy: AMX/avx512_bf16 matmuls, but its logprobs are not the fp32 trainer's
            half = HFPolicy(copy.deepcopy(fast.model).to(torch.bfloat16), fast.tokenizer,
                            max_batch_size=fast.max_batch_size)
            engines.append(HFEngine(half, "hf batched bf16"))
        if vllm:
            engines += _vllm_engines(model, threads, fast.tokenizer)
        if llama:
            engines.append(_llama_engine(model, threads or torch.get_num_threads(), embedded_gguf_path,
                                         resolve_model))
        engines = [e for e in engines if not isinstance(e, str) or print(e)]
        print(f"model {model} ({load_s:.1f}s to load), torch {torch.__version__}, threads {torch.get_num_threads()}"
              f", HF dtype {next(fast.model.parameters()).dtype}; llama.cpp runs the GGUF the HF model was "
              f"dequantized from")
        engines[0].run([[1, 2, 3]] * 2, 2)  # warm-up: first-call allocations are not generation speed
        result: dict = {}
        if scenario in ("both", "chat"):
            rows, same = _compare(engines, repeats, lambda e: run_chat(e, fast.tokenizer, n_prompts, max_tokens))
            _print(f"chat: {n_prompts} prompts x up to {max_tokens} new tokens (greedy)", rows, same)
            by = {r.name: r for r in rows}
            result = {"rows": rows, "speedup": by["hf batched"].tokens_per_s / by["hf one-by-one"].tokens_per_s}
        if scenario in ("both", "episodes"):
            rows, same = _compare(engines, repeats,
                                  lambda e: run_episodes(e, fast.tokenizer, episodes, turns, turn_tokens))
            _print(f"episodes: {episodes} episodes x {turns} turns x up to {turn_tokens} new tokens, trajectory "
                   f"layout (greedy)", rows, same)
            result.setdefault("episode_rows", rows)
        return result
    finally:
        torch.set_num_threads(before)


def _vllm_engines(model: str, threads: int | None, tokenizer) -> list:
    """The vLLM rows (batched and one by one on one engine), or a line saying why they are skipped."""
    try:
        import vllm  # noqa: F401
    except ImportError:
        return ["vllm: not installed (scripts/install.sh --vllm installs its CPU build); rows skipped"]
    from agentgym.policies.models import served_model_dir
    from agentgym.policies.vllm import VLLMPolicy

    start = time.perf_counter()
    policy = VLLMPolicy(served_model_dir(model), dtype="float32", max_model_len=4096, tokenizer=tokenizer,
                        cpu_threads=threads or None)
    print(f"vllm engine started in {time.perf_counter() - start:.0f} s ({threads or 'vLLM-bound'} threads)")
    engines = [HFEngine(policy, "vllm batched"), HFEngine(policy, "vllm one-by-one", one_by_one=True)]
    for engine in engines:
        engine.in_process = False
    engines[0].run([[1, 2, 3]] * 2, 2)
    return engines


def _llama_engine(model, threads, embedded_gguf_path, resolve_model):
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return "llama.cpp: llama-cpp-python is not installed (scripts/install.sh --test builds it); row skipped"
    source = resolve_model(model)
    if not source.gguf_file:
        return f"llama.cpp: {model} is not a GGUF model; row skipped"
    return LlamaEngine(os.path.join(source.path, source.gguf_file), threads, n_ctx=4096)


def _compare(engines, repeats: int, play) -> tuple[list[Row], dict[str, str]]:
    """Each engine's best-of-`repeats` row, interleaved so load swings hit every engine alike."""
    best: dict[str, Row] = {}
    outs: dict[str, list[list[int]]] = {}
    for _ in range(repeats):
        for engine in engines:
            row, out = play(engine)
            outs[engine.name] = out
            if engine.name not in best or row.wall_s < best[engine.name].wall_s:
                best[engine.name] = row
    ref = outs[engines[0].name]
    same = {}
    for name, out in outs.items():
        equal = sum(a == b for a, b in zip(out, ref))
        same[name] = f"{equal}/{len(ref)}"
    return [best[e.name] for e in engines], same


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=("both", "chat", "episodes"), default="both")
    parser.add_argument("--prompts", type=int, default=16, help="chat: number of prompts")
    parser.add_argument("--max-tokens", type=int, default=32, help="chat: new tokens per prompt")
    parser.add_argument("--episodes", type=int, default=8, help="episodes: concurrent episodes")
    parser.add_argument("--turns", type=int, default=4, help="episodes: turns per episode")
    parser.add_argument("--turn-tokens", type=int, default=20, help="episodes: new tokens per turn")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads for torch and llama.cpp; 0 = torch's default (on a small shared CPU, "
                             "extra OpenMP threads spin against other processes and can be several times slower)")
    parser.add_argument("--model", default="smollm2-135m-instruct", help="model spec (as for hf:MODEL)")
    parser.add_argument("--repeats", type=int, default=1, help="best of this many timings per engine")
    parser.add_argument("--no-llama", action="store_true", help="skip the llama.cpp rows")
    parser.add_argument("--bf16", action="store_true",
                        help="add a row for a bf16 copy of the model (fast where the CPU has AMX/avx512_bf16; "
                             "its logprobs differ from the fp32 trainer's, so not for training rollouts)")
    parser.add_argument("--vllm", action="store_true", help="add the vLLM engine's rows (needs vllm installed)")
    args = parser.parse_args(argv)
    bench_generation(args.prompts, args.max_tokens, args.threads, args.model, args.repeats, args.scenario,
                     args.episodes, args.turns, args.turn_tokens, not args.no_llama, args.bf16, args.vllm)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
