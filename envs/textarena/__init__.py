"""TextArena: the single-player TextArena games that run offline (suite `games`) and the two-player ones
against a fixed random opponent (suite `games-2p`), from `catalog.py` (needs the `textarena` extra to be
made; registering needs nothing)."""
from agentgym.horizon import ContextDefaults
from agentgym.registration import register
from agentgym.envs.textarena.catalog import GAMES, env_id

ENTRY = "agentgym.envs.textarena.env:TextArenaEnv"
# the agent's turns; the games end themselves sooner, except these slow ones
LONG_GAMES = {"FifteenPuzzle-v0": 200, "TowerOfHanoi-v0-hardcore": 130, "TowerOfHanoi-v0-extreme": 260,
              "Slitherlink-v0": 200}
# a game's observation shows its whole state (the board): a short history window fits 100-260 turns
CONTEXT = ContextDefaults(layout="step", history_turns=2, max_context_tokens=8192, max_observation_tokens=2048)


def register_envs() -> None:
    for game in GAMES.values():
        suite = "games" if game.players == 1 else "games-2p"
        register(env_id(game.id), ENTRY, max_turns=LONG_GAMES.get(game.id, 100), kwargs={"game": game.id},
                 suites=(suite, "textarena"), context=CONTEXT)
