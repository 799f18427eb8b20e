"""Search envs: multi-hop tool-calling QA over a corpus with a real retriever (BM25 or dense).

agentgym/Search-v0 mixes 1- to 4-hop questions over a generated fictional world; Search-<h>Hop-v0 fix
the hop count. `SearchEnv(corpus_path=..., qa_path=...)` runs on real JSONL corpora (Wikipedia + NQ/HotpotQA).
"""
from agentgym.envs.search.world import generated_corpus
from agentgym.horizon import ContextDefaults, turn_limit
from agentgym.registration import SuiteEntry, register, register_suite
from agentgym.tools.retrieval.corpus import register_corpus_source

ENTRY = "agentgym.envs.search.env:SearchEnv"
MAX_TURNS = {1: 4, 2: 6, 3: 8, 4: 10}  # the presets' budgets: at or above the gold-path limits
BUDGET = "the search presets' budget, two turns a hop and two"
# retrieved passages are ~800 tokens a turn (bytes): 10 turns need 16k
CONTEXT = ContextDefaults(layout="trajectory", max_context_tokens=16384, max_observation_tokens=2048)


def register_envs() -> None:
    register_corpus_source("generated", generated_corpus)  # `agentgym serve retrieval --corpus generated:0:small`
    register("agentgym/Search-v0", ENTRY, max_turns=turn_limit("agentgym/Search-v0", 10, BUDGET), context=CONTEXT)
    for hops, turns in MAX_TURNS.items():
        env_id = f"agentgym/Search-{hops}Hop-v0"
        register(env_id, ENTRY, max_turns=turn_limit(env_id, turns, BUDGET), kwargs={"hops": hops}, context=CONTEXT)
    register_suite("search", [SuiteEntry(f"agentgym/Search-{h}Hop-v0", label=f"search-{h}hop") for h in MAX_TURNS],
                   extend=True)
