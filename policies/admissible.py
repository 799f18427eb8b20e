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
less than decoding a free-form answer token by token; the turns of every request of one `generate` call (the
episodes in flight) share that pass, each attending to its own episode only (`candidate_scores_many`).
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

    # scoring several turns in one pass, a turn waits for a later pass only when that lets it read more than this
    # many more prompt tokens from the prefix store (another turn of the call starts like it)
    WAIT_TOKENS = 16

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
        # score every request's turn of a generate call in one pass (candidate_scores_many), at most this many
        # tokens a pass; off: one pass a turn
        self.batch_turns = True
        self.max_pass_tokens = 4096
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
        asks = {i: written.get(i, (actions, None)) for i, actions in listed.items()}  # no template: the list as is
        cands = {i: self.candidate_ids(actions) for i, (actions, _) in asks.items()}
        scored: dict[int, list[list[float]]] = {}
        if self.batch_turns and len(asks) > 1:  # every request's turn in one pass; alone where that fails
            with contextlib.suppress(RuntimeError):
                scored = dict(zip(asks, self.candidate_scores_many(
                    [(list(requests[i].prompt_ids), cands[i]) for i in asks])))
        for i, (actions, slot) in asks.items():
            try:
                token_lps = scored[i] if i in scored else self.candidate_scores(list(requests[i].prompt_ids),
                                                                                cands[i])
                out[i] = self._choose(requests[i], actions, cands[i], token_lps, slot)
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

    def _choose(self, request: GenerationRequest, actions: list[str], cands: list[list[int]],
                token_lps: list[list[float]], written: int | None = None) -> Generation:
        """Sample (or at temperature 0 take the best of) `actions` by their candidates' scores."""
        torch = require("torch", "hf")
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
        return self.candidate_scores_many([(prompt, cands)])[0]

    def candidate_scores_many(self, turns: Sequence[tuple[list[int], list[list[int]]]]) -> list[list[list[float]]]:
        """`candidate_scores` of several turns (one per episode in flight), scored together: their rows one
        after the other in one pass (at most `max_pass_tokens` new tokens a pass), each turn attending to its
        own cached prompt and its own tokens only (policies/tree_attention.py TurnsMask), so the projections and
        MLP run on bigger matrices. A turn scored before with these weights (or twice in `turns`) runs once."""
        torch = require("torch", "hf")
        free = self.free
        start = time.perf_counter()
        out: list[Any] = [None] * len(turns)
        todo: dict[Any, list[int]] = {}                   # what must run -> the indices of `turns` it answers
        with free._lock:
            version = free._weights_version()
            if version != self._scored_version:
                self._scored.clear()
                self._scored_version = version
            for k, (prompt, cands) in enumerate(turns):
                key = (tuple(prompt), tuple(map(tuple, cands)))
                if self.reuse_scores and key in self._scored:
                    self._scored.move_to_end(key)
                    out[k] = self._scored[key]
                    self._scoring["turns_reused"] += 1
                else:
                    todo.setdefault(key if self.reuse_scores else k, []).append(k)
            with torch.inference_mode():
                pending = [ks[0] for ks in todo.values()]
                while pending:  # a turn whose prompt starts like a leader's waits for the leader's stored KV
                    leaders = self._leaders(turns, pending)
                    for chunk in self._chunks(turns, leaders):
                        for k, scores in zip(chunk, self._score_pass([turns[k] for k in chunk])):
                            out[k] = scores
                    pending = [k for k in pending if k not in leaders]
            for key, ks in todo.items():                  # keyed by the turn itself with reuse_scores
                for k in ks[1:]:                          # the same turn twice in this call: run once
                    out[k] = out[ks[0]]
                    self._scoring["turns_reused"] += 1
                if self.reuse_scores:
                    self._scored[key] = out[ks[0]]
                    while len(self._scored) > 512:
                        self._scored.popitem(last=False)
            self._scoring["turns"] += len(turns)
            self._scoring["seconds"] += time.perf_counter() - start
        return [[list(lp) for lp in scores] for scores in out]

    def _leaders(self, turns: Sequence[tuple[list[int], list[list[int]]]], pending: list[int]) -> list[int]:
        """The turns of `pending` to score now: those that share no more than the prefix store already holds
        with an earlier one chosen (one episode's first turn waits for another's when both start with the same
        instructions, so the shared tokens run once, as one turn after another would run them)."""
        import numpy as np

        from agentgym.policies.kv_cache import common_prefix

        store = self.free.prefix_store
        if store is None:
            return pending
        leaders: list[int] = []
        for k in pending:
            ids = np.asarray(turns[k][0], dtype=np.int64)
            shared = max((common_prefix(ids, np.asarray(turns[j][0], dtype=np.int64)) for j in leaders), default=0)
            if shared < store.min_tokens or shared <= store.longest(turns[k][0])[0] + self.WAIT_TOKENS:
                leaders.append(k)
        return leaders

    def _chunks(self, turns: Sequence[tuple[list[int], list[list[int]]]], which: list[int]) -> list[list[int]]:
        """`which` in passes of at most `max_pass_tokens` tokens (prompt and candidates; a longer turn alone)."""
        chunks: list[list[int]] = []
        used = 0
        for k in which:
            size = len(turns[k][0]) + sum(map(len, turns[k][1]))
            if chunks and used + size <= self.max_pass_tokens:
                chunks[-1].append(k)
                used += size
            else:
                chunks.append([k])
                used = size
        return chunks

    def _score_pass(self, turns: Sequence[tuple[list[int], list[list[int]]]]) -> list[list[list[float]]]:
        """One forward pass over `turns` (see candidate_scores_many): each turn's prompt tokens the prefix store
        does not hold (or, capturing the trunk, whose hidden states are not kept) then its candidate tree."""
        torch = require("torch", "hf")
        from agentgym.policies.candidate_block import candidate_block, decoder_and_head, split_scores, target_logprobs
        from agentgym.policies.tree_attention import TurnsMask
        from agentgym.policies.trunk import run_layers

        free = self.free
        seen = free._weights_seen
        free.drop_stale_prefixes()
        if free._weights_seen != seen:  # trained since: the kept trunk pieces served their update
            self.trunk.clear()
        store = free.prefix_store
        keep = self.keep_trunk and store is not None
        capture: Any = self.trunk.capture(self.model) if keep else contextlib.nullcontext(None)
        dtype = self._dtype()
        plans: list[tuple[Any, ...]] = []
        spans: list[tuple[int, int]] = []
        ids: list[int] = []
        positions: list[int] = []
        with capture as caught:
            for prompt, cands in turns:
                reused, entry = store.longest(prompt) if store is not None else (0, None)
                # a capturing pass runs every prompt token whose trunk output is not kept yet, KV held or not
                past = min(reused, len(prompt) - 1, len(prompt) if caught is None else self.trunk.covered(prompt))
                block = candidate_block(past, prompt[past:], cands)
                plans.append((prompt, cands, reused, past, entry, block))
                spans.append((len(ids), len(ids) + len(block.ids)))
                ids += block.ids
                positions += block.positions
            held = tuple(([k[:, :past] for k in entry.keys], [v[:, :past] for v in entry.values])
                         if past and entry is not None else None for *_, past, entry, _ in plans)
            mask = TurnsMask(tuple(spans), held, tuple(plan[-1].mask(dtype, self.device) for plan in plans), {})
            decoder, head = decoder_and_head(self.model)
            embeds = decoder.get_input_embeddings()(torch.tensor([ids], device=self.device))
            hidden = decoder.norm(run_layers(decoder, embeds, mask, torch.tensor([positions], device=self.device),
                                             decoder.layers))
        reads = [s + r for (s, _), plan in zip(spans, plans) for r in plan[-1].read]
        logprobs = torch.log_softmax(head(hidden[0, torch.tensor(reads, device=self.device)]).float(), -1)
        out, offset, tally = [], 0, self._scoring
        for (s, e), (prompt, cands, reused, past, entry, block) in zip(spans, plans):
            flat = target_logprobs(logprobs[offset:offset + len(block.read)], block).tolist()
            offset += len(block.read)
            out.append(split_scores(flat, block))
            if store is not None:
                if caught:
                    self._keep_trunk(caught[0][0, s:e], prompt, past, cands)
                self._remember_prompt(store, prompt, reused, past, entry, mask.fresh, s)
            tally["prompt_tokens_run"] += len(prompt) - past
            tally["prompt_tokens_reused"] += past
            tally["candidate_tokens"] += len(block.ids) - (len(prompt) - past)
            tally["candidates"] += len(cands)
        return out

    def _dtype(self) -> Any:
        return next(self.model.parameters()).dtype

    def _keep_trunk(self, row: Any, prompt: list[int], past: int, cands: list[list[int]]) -> None:
        """Keep a pass's trunk output for one turn (`row`: its [n, d] slice): the prompt tokens it ran
        (extending the kept first `past`) and the candidate tree."""
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
                         entry: Any, fresh: dict[int, tuple[Any, Any]], start: int) -> None:
        """Keep the prompt's KV in `store` (the next turn's prompt extends it): the entry's first `past`
        positions, then the pass's keys and values of the prompt tokens it ran (row positions from `start`);
        the candidate columns are dropped."""
        import numpy as np
        import torch

        from agentgym.policies.kv_cache import CachedSequence

        n = len(prompt)
        store.hit_tokens += past
        store.miss_tokens += n - past
        if reused >= n:  # already stored whole
            return
        ran = slice(start, start + n - past)
        layers = range(len(fresh))
        keys = [torch.cat([entry.keys[i][:, :past], fresh[i][0][0, :, ran]], dim=1) if past
                else fresh[i][0][0, :, ran].clone() for i in layers]
        values = [torch.cat([entry.values[i][:, :past], fresh[i][1][0, :, ran]], dim=1) if past
                  else fresh[i][1][0, :, ran].clone() for i in layers]
        store.add(CachedSequence(np.asarray(prompt, dtype=np.int64), keys, values))
