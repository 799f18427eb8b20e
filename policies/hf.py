"""`hf`: batched generation with a transformers causal LM on CPU or GPU, token ids in and out.

The sampling loop is written here rather than borrowed from `model.generate`, because the rollout
needs per-request things `generate` cannot do in one batch: a seed, temperature, top-p, max-tokens and
stop strings per request, and the log-probability of every sampled token.

Prompts are left-padded into one batch (position ids from the attention mask, so padding never moves a
token's position), the prompt is run once and the KV cache carries the rest; finished rows are dropped
from the batch and the cache as they end.

Speed on a CPU (benchmarks/generation.py): new KV is written in place into a preallocated buffer
(transformers' DynamicCache concatenates the whole cache at every token), and a prefix store keeps the
KV of finished sequences so that a prompt extending one - the next turn of an episode in the
trajectory layout, the G samples of one task, a shared system prompt - runs only its new tokens. The
store is emptied whenever the weights change (in-place optimizer steps included), so reused KV is
always the current model's; outputs equal the plain path's up to float summation order (tested).

Logprobs: `log_softmax(logits / T)[token]` over the whole vocabulary, where T is the request's
temperature (T = 1 for greedy, T = 0), before top-p truncation. That is the number a PPO trainer
recomputes from the same prompt + response with the same temperature, so the importance ratio starts at
exactly 1 (up to float noise) for on-policy data.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from agentgym.errors import PolicyError, require
from agentgym.policies.base import BasePolicy, Generation, GenerationRequest, SamplingParams
from agentgym.policies.models import (DEFAULT_MODEL, check_available, default_device, default_dtype,
                                      load_model_and_tokenizer)


@dataclass
class _Row:
    """One request's mutable state while it is being generated."""

    index: int
    prompt: list[int]
    sampling: SamplingParams
    generator: Any
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: str | None = None
    max_new: int = 0


def eos_ids(tokenizer: Any, model: Any = None) -> frozenset[int]:
    """Every id that ends a turn: the tokenizer's EOS plus the model's generation-config EOS ids."""
    ids: set[int] = set()
    for value in (getattr(tokenizer, "eos_token_id", None),
                  getattr(getattr(model, "generation_config", None), "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    return frozenset(ids)


def _logits_to_keep_kwarg(model: Any) -> dict[str, int]:
    """Ask for the last position's logits only: the full prefill logits cost more than the layers."""
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # peft forwards kwargs
    try:
        params = inspect.signature(base.forward).parameters
    except (TypeError, ValueError):
        return {}
    for name in ("logits_to_keep", "num_logits_to_keep"):  # transformers >= 4.50 / 4.45
        if name in params:
            return {name: 1}
    return {}


def top_p_filter(probs: Any, top_p: float) -> Any:
    """Zero the tail of `probs` (1-D) outside the smallest set whose mass reaches `top_p`; renormalise."""
    if top_p >= 1.0:
        return probs
    sorted_probs, order = probs.sort(descending=True)
    cumulative = sorted_probs.cumsum(-1)
    drop = cumulative - sorted_probs >= top_p  # keep every token needed to reach top_p, at least one
    sorted_probs = sorted_probs.masked_fill(drop, 0.0)
    kept = probs.new_zeros(probs.shape).scatter(-1, order, sorted_probs)
    return kept / kept.sum()


def batch_slices(lengths: Sequence[int], max_rows: int, max_tokens: int | None) -> list[tuple[int, int]]:
    """Cut rows (in order) into consecutive [start, end) batches of at most `max_rows` rows whose padded size,
    rows x the batch's longest row, fits `max_tokens` (None: no token limit). A row longer than the budget
    gets a batch of its own: it is never refused here."""
    slices: list[tuple[int, int]] = []
    start = 0
    while start < len(lengths):
        end, longest = start + 1, lengths[start]
        while end < len(lengths) and end - start < max_rows:
            widest = max(longest, lengths[end])
            if max_tokens is not None and (end - start + 1) * widest > max_tokens:
                break
            end, longest = end + 1, widest
        slices.append((start, end))
        start = end
    return slices


def hit_stop(text: str, stops: Sequence[str], searched: int) -> bool:
    """True when a stop string appears in `text` at or after where a new match could start."""
    return any(s and s in text[max(0, searched - len(s) + 1):] for s in stops)


class HFPolicy(BasePolicy):
    """Batched, KV-cached generation with a transformers model; shares `.model` with the trainer."""

    def __init__(self, model: Any, tokenizer: Any, device: str | None = None, dtype: Any = None,
                 max_batch_size: int = 64, prefix_cache_mb: float = 512, growing_cache: bool = True,
                 max_batch_tokens: int | None = 32_768) -> None:
        """`prefix_cache_mb`: memory for the KV of past sequences, reused when a prompt extends one (0 = off);
        `growing_cache`: write new KV in place in a preallocated buffer instead of concatenating per token;
        `max_batch_tokens`: a generation batch holds at most this many padded tokens (rows x (longest prompt
        + its new tokens)): the KV cache and the prefill's attention grow with it (64 web-shop prompts of
        ~1,500 tokens in one batch held ~11 GB); None: only `max_batch_size` limits a batch."""
        torch = require("torch", "hf")
        self.model, self.tokenizer = model, tokenizer
        self.device = torch.device(device) if device else next(model.parameters()).device
        if device is not None:
            self.model.to(self.device)
        if dtype is not None:
            self.model.to(dtype)
        self.max_batch_size = max_batch_size
        if max_batch_tokens is not None and max_batch_tokens < 1:
            raise PolicyError(f"max_batch_tokens must be at least 1 (or None for no limit), got {max_batch_tokens}")
        self.max_batch_tokens = max_batch_tokens
        self.eos_token_ids = eos_ids(tokenizer, model)
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_id = pad if pad is not None else (min(self.eos_token_ids) if self.eos_token_ids else 0)
        self.max_context = int(getattr(model.config, "max_position_embeddings", 0) or 0) or None
        self._lock = threading.Lock()  # one forward pass at a time: concurrent ones only thrash the CPU
        self._last_logits_only = _logits_to_keep_kwarg(model)
        self.growing_cache = growing_cache
        self.prefix_store = None
        if prefix_cache_mb and prefix_cache_mb > 0:
            from agentgym.policies.kv_cache import CachedSequence, PrefixStore

            self.prefix_store = PrefixStore[CachedSequence](int(prefix_cache_mb * 2**20))
        self._weights_seen: int | None = None
        self.on_token: Callable[[int, int], None] | None = None
        """Called with (request index in the generate call, token id) as each token is sampled (the gateway's
        streaming, train/gateway/engine.py); None: nobody listens."""

    @classmethod
    def from_pretrained(cls, name: str = DEFAULT_MODEL, device: str | None = None, dtype: Any = None,
                        **kwargs: Any) -> "HFPolicy":
        """Load a model spec (embedded name, local folder, .gguf file or hub id); fp32 on CPU, bf16 on GPU."""
        check_available(name)  # a name that is nowhere fails now, not after seconds of imports and retries
        device = device or default_device()
        model, tokenizer = load_model_and_tokenizer(name, device, dtype or default_dtype(device))
        return cls(model, tokenizer, **kwargs)

    def chat_format(self) -> Any:
        from agentgym.chat import ChatFormat  # lazy: the chat module is only needed by the rollout

        return ChatFormat.from_tokenizer(self.tokenizer)

    def update_weights(self, state_dict: Any) -> None:
        """Copy new weights in; a no-op when the trainer trains this very module in place."""
        torch = require("torch", "hf")
        if state_dict is None or state_dict is self.model:
            return
        if isinstance(state_dict, torch.nn.Module):
            state_dict = state_dict.state_dict()
        own = self.model.state_dict()
        unknown = [k for k in state_dict if k not in own]
        if unknown:
            raise PolicyError(f"update_weights got {len(unknown)} names this model does not have, e.g. "
                              f"{unknown[:3]}; merge LoRA adapters (merge_and_unload) before pushing weights")
        with torch.no_grad():
            for name, tensor in state_dict.items():
                if own[name].data_ptr() != tensor.data_ptr():
                    own[name].copy_(tensor)
        self.clear_prefix_cache()

    def clear_prefix_cache(self) -> None:
        """Forget the stored KV (it belongs to the old weights)."""
        if self.prefix_store is not None:
            self.prefix_store.clear()

    def drop_stale_prefixes(self) -> None:
        """Clear the prefix store if the weights were trained in place since the last call (call under the lock)."""
        if self.prefix_store is not None:
            version = self._weights_version()
            if version != self._weights_seen:
                self.prefix_store.clear()
                self._weights_seen = version

    def _weights_version(self) -> int:
        """Changes whenever a parameter is replaced or written in place (optimizer steps bump `_version`)."""
        return hash(tuple((p.data_ptr(), p._version) for p in self.model.parameters()))

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        results: list[Generation | None] = [None] * len(requests)
        rows = []
        for i, request in enumerate(requests):
            error = self._check(request)
            if error:
                results[i] = Generation((), "", (), "error", error)
            else:
                rows.append(self._new_row(i, request))
        rows.sort(key=lambda r: len(r.prompt))  # similar lengths share a batch: less padding
        with self._lock:
            self.drop_stale_prefixes()
            lengths = [len(row.prompt) + row.max_new for row in rows]
            for start, end in batch_slices(lengths, self.max_batch_size, self.max_batch_tokens):
                chunk = rows[start:end]
                try:
                    self._generate_batch(chunk)
                except RuntimeError as exc:  # e.g. CUDA out of memory: fail this chunk, not the rollout
                    for row in chunk:
                        results[row.index] = Generation((), "", (), "error", f"generation failed: {exc}")
                    continue
                for row in chunk:
                    results[row.index] = self._finish(row)
        return results  # type: ignore[return-value]

    def _check(self, request: GenerationRequest) -> str | None:
        if not request.prompt_ids:
            return "empty prompt: the hf policy needs prompt token ids (is the chat format set?)"
        vocab = self.model.get_input_embeddings().num_embeddings
        bad = [t for t in request.prompt_ids if not 0 <= int(t) < vocab]
        if bad:
            return f"prompt has token ids outside the vocabulary [0, {vocab}): {bad[:5]}"
        if self.max_context and len(request.prompt_ids) >= self.max_context:
            return f"prompt of {len(request.prompt_ids)} tokens fills the model's context of {self.max_context}"
        return None

    def _new_row(self, index: int, request: GenerationRequest) -> _Row:
        torch = require("torch", "hf")
        sampling = request.sampling
        generator = None
        if sampling.seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(int(sampling.seed))
        max_new = sampling.max_tokens
        if self.max_context:
            max_new = min(max_new, self.max_context - len(request.prompt_ids))
        return _Row(index, [int(t) for t in request.prompt_ids], sampling, generator, max_new=max_new)

    def _finish(self, row: _Row) -> Generation:
        shown = row.tokens[:-1] if row.tokens and row.tokens[-1] in self.eos_token_ids else row.tokens
        text = self.tokenizer.decode(shown, skip_special_tokens=False)
        return Generation(tuple(row.tokens), text, tuple(row.logprobs), row.finish or "length")

    def _generate_batch(self, rows: list[_Row]) -> None:
        torch = require("torch", "hf")
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode():
                if self.prefix_store is not None:
                    self._share_group_prompts(rows)
                self._decode_loop(rows)
        finally:
            self.model.train(was_training)

    def _new_cache(self, capacity: int) -> Any:
        if not self.growing_cache:
            return None  # the model makes its own DynamicCache
        from agentgym.policies.kv_cache import growing_cache

        return growing_cache(self.model.config.get_text_config().num_hidden_layers, capacity)

    def _prefill(self, rows: list[_Row]) -> tuple[Any, Any, Any]:
        """Run the left-padded prompts once; returns (last logits, attention mask, KV cache).

        With a prefix store, each row starts from the longest stored prefix of its prompt: the reused
        KV is right-aligned in a cache region of P columns, and only the last S prompt tokens run,
        where S is the most any row has left to run (rows with less re-run a few covered tokens).
        """
        torch = require("torch", "hf")
        from agentgym.policies.kv_cache import cache_kwarg, output_cache

        reuse = [self._stored_prefix(row) for row in rows]
        run = max(len(row.prompt) - n for row, (n, _) in zip(rows, reuse))
        used = [max(0, len(row.prompt) - run) for row in rows]
        past = max(used)
        capacity = past + run + max(row.max_new for row in rows) + 1
        cache = self._new_cache(capacity)
        ids = torch.full((len(rows), run), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), past + run), dtype=torch.long)
        for b, row in enumerate(rows):
            tail = row.prompt[len(row.prompt) - min(run, len(row.prompt)):]
            ids[b, run - len(tail):] = torch.tensor(tail)
            mask[b, past + run - len(tail):] = 1
            mask[b, past - used[b]:past] = 1
        if past:
            cache = self._preload(cache, [entry for _, entry in reuse], used, past, capacity)
        if self.prefix_store is not None:
            self.prefix_store.hit_tokens += sum(used)
            self.prefix_store.miss_tokens += sum(len(r.prompt) for r in rows) - sum(used)
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)[:, past:]
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                         **cache_kwarg(self.model, cache), **self._last_logits_only)
        return out.logits[:, -1, :].float(), mask, output_cache(out)

    def _stored_prefix(self, row: _Row) -> tuple[int, Any]:
        """(prompt tokens whose KV the store holds, the entry); at least one token is always left to run."""
        if self.prefix_store is None:
            return 0, None
        n, entry = self.prefix_store.longest(row.prompt)
        return min(n, len(row.prompt) - 1), entry

    def _preload(self, cache: Any, entries: list[Any], used: list[int], past: int, capacity: int) -> Any:
        """A cache whose first `past` columns hold each row's reused prefix, right-aligned (zeros before)."""
        torch = require("torch", "hf")
        from agentgym.policies.kv_cache import growing_cache

        sample = next(e for e in entries if e is not None)
        cache = cache if cache is not None else growing_cache(len(sample.keys), capacity)
        for layer_index, layer in enumerate(cache.layers):
            heads, _, dim = sample.keys[layer_index].shape
            keys = torch.zeros((len(entries), heads, past, dim), dtype=sample.keys[layer_index].dtype,
                               device=self.device)
            values = torch.zeros_like(keys)
            for b, (entry, n) in enumerate(zip(entries, used)):
                if n:
                    keys[b, :, past - n:] = entry.keys[layer_index][:, :n]
                    values[b, :, past - n:] = entry.values[layer_index][:, :n]
            layer.preload(keys, values, capacity)
        return cache

    def _remember(self, rows: list[_Row], mask: Any, cache: Any, batch_positions: list[int]) -> None:
        """Store the KV of finished rows (prompt + all but the last token: the last was never fed)."""
        if self.prefix_store is None or not hasattr(cache, "layers"):
            return
        import numpy as np

        from agentgym.policies.kv_cache import CachedSequence

        for b in batch_positions:
            row = rows[b]
            sequence = row.prompt + row.tokens[:-1]
            columns = mask[b].nonzero().squeeze(1)
            if len(columns) != len(sequence):  # cannot happen; never store KV that does not match its tokens
                continue
            keys = [layer.keys[b].index_select(1, columns) for layer in cache.layers]
            values = [layer.values[b].index_select(1, columns) for layer in cache.layers]
            self.prefix_store.add(CachedSequence(np.asarray(sequence, dtype=np.int64), keys, values))

    def _share_group_prompts(self, rows: list[_Row]) -> None:
        """Prompts that several rows share (a group's G samples of one task) run once, then are reused."""
        counts: dict[tuple[int, ...], int] = {}
        for row in rows:
            counts[tuple(row.prompt)] = counts.get(tuple(row.prompt), 0) + 1
        shared = [list(p) for p, c in counts.items() if c > 1 and self._stored_prefix_len(p) < len(p) - 1]
        if not shared:
            return
        probes = [_Row(-1, prompt, SamplingParams(), None, tokens=[0], max_new=0) for prompt in shared]
        _, mask, cache = self._prefill(probes)
        self._remember(probes, mask, cache, list(range(len(probes))))

    def _stored_prefix_len(self, prompt: list[int]) -> int:
        return self.prefix_store.longest(prompt)[0] if self.prefix_store is not None else 0

    def _decode_loop(self, rows: list[_Row]) -> None:
        torch = require("torch", "hf")
        from agentgym.policies.kv_cache import cache_kwarg, output_cache

        logits, mask, cache = self._prefill(rows)
        active = list(range(len(rows)))  # batch position -> index into rows
        while True:
            tokens = self._sample([rows[r] for r in active], logits)
            keep = [b for b, r in enumerate(active) if rows[r].finish is None]
            done = [b for b, r in enumerate(active) if rows[r].finish is not None]
            if done:
                self._remember([rows[r] for r in active], mask, cache, done)
            if not keep:
                return
            if len(keep) < len(active):  # drop finished rows from the batch and the cache
                index = torch.tensor(keep, device=self.device)
                cache.batch_select_indices(index)
                mask = mask.index_select(0, index)
                active = [active[b] for b in keep]
                tokens = [tokens[b] for b in keep]
            mask = torch.cat([mask, mask.new_ones((len(active), 1))], dim=1)
            positions = mask.sum(-1, keepdim=True) - 1
            step_ids = torch.tensor(tokens, device=self.device).unsqueeze(1)
            out = self.model(input_ids=step_ids, attention_mask=mask, position_ids=positions,
                             use_cache=True, **cache_kwarg(self.model, cache))
            logits, cache = out.logits[:, -1, :].float(), output_cache(out)

    def _sample(self, rows: list[_Row], logits: Any) -> list[int]:
        """Pick each row's next token (one batched log-softmax), record it and its logprob, mark ends."""
        torch = require("torch", "hf")
        temperatures = torch.tensor([r.sampling.temperature or 1.0 for r in rows], device=logits.device)
        logprobs = torch.log_softmax(logits / temperatures.unsqueeze(1), dim=-1)
        tokens = logprobs.argmax(dim=-1)  # greedy rows (temperature 0) keep this
        for b, row in enumerate(rows):
            if row.sampling.temperature > 0:
                probs = top_p_filter(logprobs[b].exp(), row.sampling.top_p)
                tokens[b] = torch.multinomial(probs, 1, generator=row.generator)[0]
        chosen = logprobs.gather(1, tokens.unsqueeze(1)).squeeze(1).tolist()
        picked = tokens.tolist()
        for row, token, logprob in zip(rows, picked, chosen):
            row.tokens.append(token)
            row.logprobs.append(logprob)
            if self.on_token is not None:
                self.on_token(row.index, token)
            if token in self.eos_token_ids:
                row.finish = "stop"
            elif row.sampling.stop and self._stopped(row):
                row.finish = "stop"
            elif len(row.tokens) >= row.max_new:
                row.finish = "length"
        return picked

    def _stopped(self, row: _Row) -> bool:
        before = len(self.tokenizer.decode(row.tokens[:-1], skip_special_tokens=False))
        text = self.tokenizer.decode(row.tokens, skip_special_tokens=False)
        return hit_stop(text, row.sampling.stop, before)
