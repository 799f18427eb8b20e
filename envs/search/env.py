"""SearchEnv: answer a (multi-hop) question by calling `search(query, k)`, then `answer(text)`.

Observations carry the retrieved passages, cut to `obs_token_budget` tokens per search. Tokens here are
whitespace-separated words (cheap and tokenizer-free); the rollout truncates again by model tokens.
Rewards (all in `reward_components`, summing to the reward):
    em | f1   the outcome on the answer turn: exact match or token F1 (`reward=`), best over golden answers
    support   optional, `support_bonus` for each supporting document a search retrieves for the first time
`info` also carries `em` and `f1` on the answer turn, and `retrieved` (the doc ids this turn).
`anchor` is the tuple of the doc ids retrieved this turn (so GiGPO groups turns that saw the same
passages), the question on reset, and the observation text otherwise.

The retriever is the process-wide in-memory index of the corpus (built once per corpus, optionally
cached on disk with `cache_dir`), a server at `retriever_url`, or `retriever_url="auto"`, which starts
`agentgym serve retrieval` in a child process once per corpus and shares it.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from agentgym.core import ToolEnv, make_info
from agentgym.envs.search.expert import SearchExpert
from agentgym.envs.search.metrics import exact_match, f1_score
from agentgym.envs.search.questions import SPLITS, Question, make_question
from agentgym.errors import ConfigError
from agentgym.tools import Tool, ToolResult
from agentgym.tools.retrieval.base import METHODS, Retriever, get_retriever
from agentgym.tools.retrieval.corpus import Corpus, Hit, corpus_from_spec

INSTRUCTIONS = (
    "Answer the question using a document collection you can search. The facts are fictional: search for "
    "them, do not guess. Call the search tool with a short query, e.g. an entity name from the question. "
    "A question may need several searches, one hop at a time: first find the entity the question describes "
    "(e.g. who wrote a book), then search for that entity. When you know the answer, call the answer tool "
    "or write <answer>...</answer>. Answer with just the name or the number.")


@lru_cache(maxsize=8)
def _corpus(spec: str) -> Corpus:
    return corpus_from_spec(spec)


def count_tokens(text: str) -> int:
    """Whitespace word count: the env-side token measure (cheap, no tokenizer needed)."""
    return len(text.split())


def truncate_tokens(text: str, budget: int) -> str:
    words = text.split()
    return text if len(words) <= budget else " ".join(words[:max(budget, 0)]) + " ..."


def format_hits(query: str, hits: list[Hit], budget: int) -> str:
    """Numbered passages, each cut to an equal share of the token budget."""
    query = truncate_tokens(query[:2000], 32)
    if not hits:
        return f'No documents matched "{query}". Try other words, e.g. a name from the question.'
    share = max(budget // len(hits), 8)
    lines = [f'Results for "{query}":']
    for n, hit in enumerate(hits, 1):
        lines.append(f"[{n}] {hit.title} (doc {hit.doc_id})\n{truncate_tokens(hit.text, share)}")
    return "\n".join(lines)


class SearchEnv(ToolEnv):
    action_listing = "none"  # queries are free text (agentgym/action_listing.py)
    # the retriever is stateless: the question and what was seen are the whole episode
    snapshot_fields = ("question", "seen", "_answer_scores", "_expert")
    """Multi-hop QA over a generated fictional world (default) or a real corpus + QA set."""

    def __init__(self, hops: int | None = None, kind: str | None = None, split: str = "train",
                 world_seed: int = 0, world_size: str | int = "small", corpus_path: str | None = None,
                 qa_path: str | dict[str, str] | None = None, retriever: str = "bm25",
                 retriever_url: str | None = None, cache_dir: str | None = None, top_k: int = 3,
                 max_k: int = 10, obs_token_budget: int = 400, reward: str = "em", support_bonus: float = 0.0):
        super().__init__()
        if retriever not in METHODS:
            raise ConfigError(f"retriever must be one of {', '.join(METHODS)}, got {retriever!r}")
        if reward not in ("em", "f1"):
            raise ConfigError(f"reward must be 'em' or 'f1', got {reward!r}")
        if not 1 <= top_k <= max_k:
            raise ConfigError(f"top_k must be between 1 and max_k={max_k}, got {top_k}")
        if hops not in (None, 1, 2, 3, 4) or kind not in (None, "bridge", "comparison") or (
                split not in SPLITS and not isinstance(qa_path, dict)):
            raise ConfigError(f"bad question settings hops={hops!r} kind={kind!r} split={split!r}; use hops 1-4 "
                              "or None, kind 'bridge'/'comparison' or None, split 'train'/'test'")
        if obs_token_budget < 16:
            raise ConfigError(f"obs_token_budget must be at least 16 tokens, got {obs_token_budget}")
        if (corpus_path is None) != (qa_path is None) and not (qa_path and retriever_url):
            raise ConfigError("a real corpus needs both corpus_path (documents JSONL) and qa_path (questions JSONL)")
        self.hops, self.kind, self.split = hops, kind, split
        self.qa_path, self.top_k, self.max_k = qa_path, top_k, max_k
        self.obs_token_budget, self.reward_name, self.support_bonus = obs_token_budget, reward, support_bonus
        self.corpus_spec = corpus_path or f"generated:{world_seed}:{world_size}"
        self.world_seed, self.world_size = world_seed, world_size
        self.retriever_method, self.retriever_url, self.cache_dir = retriever, retriever_url, cache_dir
        self._retriever: Retriever | None = None
        self._tools = [Tool(self._search, name="search"), Tool(self._answer, name="answer")]
        self.question: Question | None = None
        self.seen: set[str] = set()
        self._turn_ids: list[str] = []
        self._answer_scores: dict[str, Any] = {}
        self._expert = SearchExpert()  # fed what the agent is shown (expert_action)

    # ------------------------------------------------------------------ tools
    @property
    def retriever(self) -> Retriever:
        if self._retriever is None:
            url = self.retriever_url
            if url == "auto":
                from agentgym.tools.retrieval.server import launch_server

                url = launch_server(self.corpus_spec, dense=self.retriever_method == "dense")
            corpus = None if url else _corpus(self.corpus_spec)
            self._retriever = get_retriever(corpus, self.retriever_method, url=url, cache_dir=self.cache_dir)
        return self._retriever

    def _search(self, query: str, k: int = 3) -> str:
        """Search the document collection; returns the best-matching passages.

        Args:
            query: What to look for, e.g. the name of a person, place, organisation or work.
            k: How many passages to return, from 1 to 10.
        """
        if not query.strip():
            raise ValueError("the query is empty; search for a name or a few words from the question")
        if not 1 <= k <= self.max_k:
            raise ValueError(f"k must be between 1 and {self.max_k}, got {k}")
        hits = self.retriever.search(query, k)
        self._turn_ids.extend(h.doc_id for h in hits)
        return format_hits(query, hits, self.obs_token_budget)

    def _answer(self, text: str) -> str:
        """Give the final answer; the episode ends.

        Args:
            text: The answer: just the name or the number.
        """
        return "Answer received."

    def tool_list(self) -> list[Tool]:
        return self._tools

    @property
    def instructions(self) -> str:
        return INSTRUCTIONS

    # ------------------------------------------------------------------ episode
    def _questions(self, split: str) -> tuple[Question, ...] | None:
        if self.qa_path is None:
            return None
        from agentgym.envs.search.loader import load_qa

        path = self.qa_path.get(split) if isinstance(self.qa_path, dict) else self.qa_path
        if path is None:
            raise ConfigError(f"no questions for split {split!r}; qa_path has splits {', '.join(self.qa_path)}")
        return load_qa(str(path))

    def reset_task(self, seed: int | None, options: dict[str, Any]):
        split = options.get("split", self.split)
        index = options.get("task_id", seed)
        if index is None:
            index = int(self.np_random.integers(2**31))
        real = self._questions(split)
        if real is not None:
            self.question = real[int(index) % len(real)]
        else:
            from agentgym.envs.search.world import generate_world

            hops = options.get("difficulty", self.hops)
            self.question = make_question(generate_world(self.world_seed, self.world_size), int(index),
                                          hops, self.kind, split)
        self.seen, self._turn_ids, self._answer_scores = set(), [], {}
        _ = self.retriever  # build (or connect) now, not inside the first search's tool time limit
        q = self.question
        self._expert.observe(f"Question: {q.question}")
        return f"Question: {q.question}", make_info(task_id=q.id, anchor=("question", q.id), hops=q.hops,
                                                      kind=q.kind, ground_truth=list(q.answers))

    def step(self, action: str):
        self._turn_ids = []
        obs, reward, terminated, truncated, info = super().step(action)
        self._expert.observe(obs)
        info["retrieved"] = list(self._turn_ids)
        if self._turn_ids:
            info["anchor"] = tuple(self._turn_ids)
        info.update(self._answer_scores)
        self.seen.update(self._turn_ids)
        return obs, reward, terminated, truncated, info

    def score(self, action: str, results: list[ToolResult], answer: str | None):
        assert self.question is not None, "call reset() before step()"
        components: dict[str, float] = {}
        new_support = set(self._turn_ids) & set(self.question.support) - self.seen
        if self.support_bonus and new_support:
            components["support"] = self.support_bonus * len(new_support)
        self._answer_scores = {}
        if answer is None:
            return components, False, False
        em, f1 = exact_match(answer, self.question.answers), f1_score(answer, self.question.answers)
        self._answer_scores = {"em": em, "f1": f1, "answer": answer}
        components[self.reward_name] = em if self.reward_name == "em" else f1
        return components, True, em == 1.0

    def oracle_action(self) -> str | None:
        """Search each supporting document's title (hop by hop) until all were retrieved, then answer."""
        q = self.question
        if q is None:
            return None
        missing = [d for d in q.support if d not in self.seen]
        if missing and self.qa_path is None:
            from agentgym.envs.search.world import generate_world

            query = generate_world(self.world_seed, self.world_size).entities[missing[0]].name
            return self.render_calls([("search", {"query": query, "k": self.top_k})])
        if not self.seen and self.qa_path is not None:
            return self.render_calls([("search", {"query": q.question, "k": self.top_k})])
        return self.render_calls([("answer", {"text": q.answers[0]})])

    def expert_action(self) -> str | None:
        """The fair expert's action (expert.py): a query built from the question and the passages shown so
        far, or the answer read in them; never the hidden question record. None: it found no path."""
        return self._expert.act(self.render_calls) if self.question is not None else None

    def render(self) -> str | None:
        return getattr(self, "_last_obs", None)

