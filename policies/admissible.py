"""Acting among admissible actions: score each of `info["admissible_actions"]` by the model's
log-likelihood and sample from the renormalised distribution (valid by construction).

    policy = AdmissiblePolicy(model, tokenizer)         # or load_policy("admissible:checkpoint:DIR")

Each candidate is tokenized as a response would be (the chat format's encoding of the text followed by
its end-of-turn token), so the chosen candidate's ids are exactly what the model would have had to
generate: `Generation.token_ids` / `logprobs` hold them and their per-token log-probabilities, and the
rollout keeps token-in-token-out. `Generation.choice` holds every candidate's ids and the pick; the rollout
puts it on the Turn, where the exact choice update (train/updaters/choice_ppo.py) reads it. Scoring costs one
forward pass over the prompt tokens not already cached (the policy's prefix store holds earlier turns of the
episode) and all candidates side by side, usually
less than decoding a free-form answer token by token.
Requests without admissible actions fall back to free generation (`HFPolicy`). An action template among them
(the web shop's "search[<query>]", agentgym/action_templates.py) is written first: free generation after the
prompt and the template's prefix, up to its suffix; the written action is the first candidate
(`Choice.written`), scored beside the listed ones.

`choice_logprob` is the log-probability of the chosen action under the renormalised distribution
(what was actually sampled); `candidate_scores` returns every candidate's total log-likelihood.
"""
from __future__ import annotations

import contextlib
import math
import time
from collections import OrderedDict
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Sequence

from agentgym.action_templates import first_template, template_parts, without_templates
from agentgym.errors import require
from agentgym.policies.base import BasePolicy, Generation, GenerationRequest
from agentgym.policies.rollout_trunk import RolloutTrunk
from agentgym.policy import Choice

if TYPE_CHECKING:
    from agentgym.policies.kv_cache import CachedSequence, PrefixStore


def renormalised(scores: Sequence[float], temperature: float) -> list[float]:
    """Probabilities softmax(scores / temperature); temperature 0 puts all mass on the best (first on ties)."""
    if not scores:
        return []
    if temperature <= 0:
        best = max(range(len(scores)), key=lambda i: scores[i])
        return [1.0 if i == best else 0.0 for i in range(len(scores))]
    top = max(scores)
    weights = [math.exp((s - top) / temperature) for s in scores]
    total = sum(weights)
    return [w / total for w in weights]


def choice_logprob(scores: Sequence[float], chosen: int, temperature: float = 1.0) -> float:
    """log of the renormalised probability of candidate `chosen`."""
    p = renormalised(scores, temperature)[chosen]
    return math.log(p) if p > 0 else -math.inf


class AdmissiblePolicy(BasePolicy):
    """Chooses one admissible action per turn by likelihood (see the module docstring)."""

    def __init__(self, model: Any, tokenizer: Any, chat: Any = None, max_candidates: int = 256,
                 prefix_cache_mb: float = 2048):
        from agentgym.policies.hf import HFPolicy

        # every episode in flight keeps its prompt KV here (~46 KB a token for SmolLM2-135M in fp32): 16
        # episodes of ~800 tokens overflow the free policy's default 512 MB and re-run most prompts
        self.free = HFPolicy(model, tokenizer, prefix_cache_mb=prefix_cache_mb)
        self.model, self.tokenizer = model, tokenizer
        self.device = self.free.device
        self.max_context = self.free.max_context
        self.max_candidates = max_candidates
        self._chat = chat
        # what scoring cost since the last `scoring_stats()` (the trainer logs it per iteration)
        self._scoring = {"turns": 0.0, "seconds": 0.0, "prompt_tokens_run": 0.0, "prompt_tokens_reused": 0.0,
                         "candidate_tokens": 0.0, "candidates": 0.0, "turns_reused": 0.0}
        # keep_trunk (the choice update turns it on): keep the hidden states entering the first trainable
        # layer from each scoring pass, so the update need not recompute the frozen trunk (rollout_trunk.py)
        self.keep_trunk = False
        self.trunk = RolloutTrunk()
        # a turn scored before with these weights (the same prompt, the same candidates: a group's plays of one
        # task until their picks part) is answered from here, not run again; cleared when the weights change
        self.reuse_scores = True
        self._scored: OrderedDict[tuple, list[list[float]]] = OrderedDict()
        self._scored_version: int | None = None

    def scoring_stats(self) -> dict[str, float]:
        """Turns scored, seconds spent scoring, prompt tokens run vs served from the prefix store, candidate
        tree tokens and candidates, since the last call (and reset them)."""
        with self.free._lock:
            stats, self._scoring = self._scoring, dict.fromkeys(self._scoring, 0.0)
        return stats

    @classmethod
    def from_policy(cls, policy: Any) -> "AdmissiblePolicy":
        return cls(policy.model, policy.tokenizer)

    def chat_format(self) -> Any:
        if self._chat is None:
            self._chat = self.free.chat_format()
        return self._chat

    def update_weights(self, state_dict: Any) -> None:
        self.free.update_weights(state_dict)

    def candidate_ids(self, actions: Sequence[str]) -> list[list[int]]:
        chat = self.chat_format()
        end = chat.end_of_turn_id
        return [chat.encode(a) + ([end] if end is not None else []) for a in actions]

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        out: list[Generation | None] = [None] * len(requests)
        free, listed = [], {}
        for i, request in enumerate(requests):
            actions = list(((request.context.info or {}).get("admissible_actions") or ())
                           if request.context is not None else ())[:self.max_candidates]
            if not actions or not request.prompt_ids:
                free.append(i)
            else:
                listed[i] = [str(a) for a in actions]
        written = self._write_templates({i: (requests[i], a) for i, a in listed.items()})
        for i, actions in listed.items():
            actions, slot = written.get(i, (actions, None))  # no template: the list as it is
            try:
                out[i] = self._choose(requests[i], actions, slot)
            except RuntimeError as exc:  # e.g. out of memory: fail this request, not the rollout
                out[i] = Generation((), "", (), "error", f"scoring admissible actions failed: {exc}")
        if free:
            for i, gen in zip(free, self.free.generate([requests[i] for i in free])):
                out[i] = gen
        return out  # type: ignore[return-value]

    def _write_templates(self, listed: dict[int, tuple[GenerationRequest, list[str]]]
                         ) -> dict[int, tuple[list[str], int]]:
        """Write the slot of each request's first action template (agentgym/action_templates.py): free
        generation after the prompt and the template's prefix, up to its suffix, in one batch. Returns, per
        request with a template, its actions with that template replaced by the written action (further
        templates dropped) and the written action's index."""
        asks, where = [], []
        chat = self.chat_format()
        for i, (request, actions) in listed.items():
            slot = first_template(actions)
            if slot is None:
                continue
            prefix, suffix = template_parts(actions[slot])  # type: ignore[misc]
            stop = tuple(request.sampling.stop) + ((suffix,) if suffix else ())
            asks.append(GenerationRequest((*request.prompt_ids, *chat.encode(prefix)),
                                          replace(request.sampling, stop=stop)))
            where.append((i, slot, prefix, suffix))
        out = {}
        for (i, slot, prefix, suffix), gen in zip(where, self.free.generate(asks) if asks else []):
            text = gen.text.split(suffix, 1)[0] if suffix else gen.text
            for end in chat.stop_strings:  # a slot ends at the end of the turn too
                text = text.split(end, 1)[0]
            action = f"{prefix}{text.strip()}{suffix}"
            actions = listed[i][1]
            kept = [a for a in without_templates(actions) if a != action]
            out[i] = ([action, *kept], 0)
        return out

    def _choose(self, request: GenerationRequest, actions: list[str], written: int | None = None) -> Generation:
        torch = require("torch", "hf")
        cands = self.candidate_ids(actions)
        token_lps = self.candidate_scores(list(request.prompt_ids), cands)
        scores = [sum(lp) for lp in token_lps]
        probs = renormalised(scores, request.sampling.temperature)
        if request.sampling.temperature > 0:
            generator = torch.Generator().manual_seed(int(request.sampling.seed)) \
                if request.sampling.seed is not None else None
            pick = int(torch.multinomial(torch.tensor(probs), 1, generator=generator)[0])
        else:
            pick = probs.index(1.0)
        return Generation(tuple(cands[pick]), actions[pick], tuple(token_lps[pick]), "stop",
                          choice=Choice(tuple(map(tuple, cands)), pick, scores=tuple(scores), written=written))

    def candidate_scores(self, prompt: list[int], cands: list[list[int]]) -> list[list[float]]:
        """Per-token log-probabilities of each candidate continuing `prompt`: one forward pass over the
        prompt tokens the prefix store does not hold and every candidate, laid out in one row with a tree
        mask (policies/candidate_block.py), so the prompt's KV is never repeated per candidate."""
        torch = require("torch", "hf")
        from agentgym.policies.candidate_block import candidate_block, decoder_and_head, split_scores, target_logprobs
        from agentgym.policies.kv_cache import cache_kwarg

        free = self.free
        start = time.perf_counter()
        key = (tuple(prompt), tuple(map(tuple, cands)))
        with free._lock:
            version = free._weights_version()
            if version != self._scored_version:
                self._scored.clear()
                self._scored_version = version
            if self.reuse_scores and key in self._scored:
                self._scored.move_to_end(key)
                self._scoring["turns"] += 1
                self._scoring["turns_reused"] += 1
                self._scoring["seconds"] += time.perf_counter() - start
                return [list(lp) for lp in self._scored[key]]
        with free._lock, torch.inference_mode():
            seen = free._weights_seen
            free.drop_stale_prefixes()
            if free._weights_seen != seen:  # trained since: the kept trunk pieces served their update
                self.trunk.clear()
            store = free.prefix_store
            reused, entry = store.longest(prompt) if store is not None else (0, None)
            keep = self.keep_trunk and store is not None
            capture: Any = self.trunk.capture(self.model) if keep else contextlib.nullcontext(None)
            with capture as caught:
                # a capturing pass runs every prompt token whose trunk output is not kept yet, KV held or not
                past = min(reused, len(prompt) - 1, len(prompt) if caught is None else self.trunk.covered(prompt))
                block = candidate_block(past, prompt[past:], cands)
                cache = self._cache(entry, past, past + len(block.ids))
                decoder, head = decoder_and_head(self.model)
                hidden = decoder(
                    input_ids=torch.tensor([block.ids], device=self.device),
                    position_ids=torch.tensor([block.positions], device=self.device),
                    attention_mask=block.mask(self._dtype(), self.device), use_cache=True,
                    **cache_kwarg(decoder, cache)).last_hidden_state
            read = hidden[0, torch.tensor(block.read, device=self.device)]
            logprobs = torch.log_softmax(head(read).float(), -1)
            flat = target_logprobs(logprobs, block).tolist()
            if store is not None:
                self._keep_trunk(caught, prompt, past, cands)
                self._remember_prompt(store, prompt, reused, past, cache)
            tally = self._scoring
            tally["turns"] += 1
            tally["seconds"] += time.perf_counter() - start
            tally["prompt_tokens_run"] += len(prompt) - past
            tally["prompt_tokens_reused"] += past
            tally["candidate_tokens"] += len(block.ids) - (len(prompt) - past)
            tally["candidates"] += len(cands)
            scores = split_scores(flat, block)
            if self.reuse_scores:
                self._scored[key] = scores
                while len(self._scored) > 512:
                    self._scored.popitem(last=False)
        return [list(lp) for lp in scores]

    def _dtype(self) -> Any:
        return next(self.model.parameters()).dtype

    def _cache(self, entry: Any, past: int, capacity: int) -> Any:
        """A growing KV cache holding the first `past` prompt tokens from a stored entry (empty if 0)."""
        from agentgym.policies.kv_cache import growing_cache, growing_layers

        cache = growing_cache(self.model.config.get_text_config().num_hidden_layers, capacity)
        if past:
            for layer, keys, values in zip(growing_layers(cache), entry.keys, entry.values):
                layer.preload(keys[None, :, :past], values[None, :, :past], capacity)
        return cache

    def _keep_trunk(self, caught: list[Any] | None, prompt: list[int], past: int, cands: list[list[int]]) -> None:
        """Keep this pass's trunk output: the prompt tokens it ran (extending the kept first `past`) and the
        candidate tree (nothing when not captured)."""
        if not caught:
            return
        row = caught[0][0]
        tail = len(prompt) - past
        self.trunk.keep_tree(prompt, cands, row[tail:])
        self.trunk.keep_prompt(prompt, past, row[:tail])

    def rollout_trunk(self, model: Any, ids: Sequence[int], turns: Sequence[tuple[int, Sequence[Sequence[int]]]]
                      ) -> Any:
        """The frozen trunk's output for the training row turns_block(0, ids, turns) from this policy's own
        scoring passes (policies/rollout_trunk.py), or None when it was not kept or is stale for `model`
        (the model the update trains: a copy's trunk has other weights and is refused)."""
        with self.free._lock:
            return self.trunk.row(model, ids, turns)

    def _remember_prompt(self, store: PrefixStore[CachedSequence], prompt: list[int], reused: int, past: int,
                         cache: Any) -> None:
        """Keep the prompt's KV in `store` (the next turn's prompt extends it); the candidate columns are dropped."""
        import numpy as np

        from agentgym.policies.kv_cache import CachedSequence

        n = len(prompt)
        store.hit_tokens += past
        store.miss_tokens += n - past
        if reused >= n:  # already stored whole
            return
        keys = [layer.keys[0, :, :n].clone() for layer in cache.layers]
        values = [layer.values[0, :, :n].clone() for layer in cache.layers]
        store.add(CachedSequence(np.asarray(prompt, dtype=np.int64), keys, values))
