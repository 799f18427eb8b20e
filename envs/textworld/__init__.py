"""TextWorld: real TextWorld games as agentgym envs (needs the `textworld` extra to be made)."""
from agentgym.horizon import ContextDefaults, turn_limit
from agentgym.registration import register

ENTRY = "agentgym.envs.textworld.env:TextWorldEnv"
# 50-100 turns of room descriptions outgrow 8k: fold
CONTEXT = ContextDefaults(layout="fold", max_context_tokens=8192, max_observation_tokens=2048)
# budgets above the walkthrough's limit (agentgym/gold_paths.json): the walkthrough knows the map, an agent explores
EXPLORE = "room to explore an unknown map"


def register_envs() -> None:
    # games are generated from the reset seed with TextWorld's generator, then cached on disk
    register("agentgym/TextWorld-v0", ENTRY, max_turns=turn_limit("agentgym/TextWorld-v0", 50, EXPLORE),
             suites=("textworld",), context=CONTEXT)
    register("agentgym/TextWorld-Simple-v0", ENTRY, max_turns=turn_limit("agentgym/TextWorld-Simple-v0", 100, EXPLORE),
             kwargs={"challenge": "tw-simple"}, suites=("textworld",), context=CONTEXT)
    register("agentgym/TextWorld-CoinCollector-v0", ENTRY,
             max_turns=turn_limit("agentgym/TextWorld-CoinCollector-v0", 50, EXPLORE),
             kwargs={"challenge": "tw-coin_collector"}, suites=("textworld",), context=CONTEXT)
    register("agentgym/TextWorld-TreasureHunter-v0", ENTRY,
             max_turns=turn_limit("agentgym/TextWorld-TreasureHunter-v0", 50, EXPLORE),
             kwargs={"challenge": "tw-treasure_hunter"}, suites=("textworld",), context=CONTEXT)
    register("agentgym/TextWorld-Cooking-v0", ENTRY, max_turns=turn_limit("agentgym/TextWorld-Cooking-v0", 100, EXPLORE),
             kwargs={"challenge": "tw-cooking"}, suites=("textworld",), context=CONTEXT)
    # a game file of your own: agentgym.make("agentgym/TextWorld-Game-v0", game="path/to/game.z8")
    register("agentgym/TextWorld-Game-v0", ENTRY,
             max_turns=turn_limit("agentgym/TextWorld-Game-v0", 100, "a game file of your own, not measured"),
             context=CONTEXT)
