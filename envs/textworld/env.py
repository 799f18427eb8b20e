"""`TextWorldEnv`: real TextWorld games (`.z8`/`.ulx`) as agentgym text envs.

Either a fixed game file (`game=PATH`) or games generated on the fly by TextWorld's generator from
the reset seed (cached, see `games.py`). Each turn's reward is the game's score delta (`score`
component, times `score_reward`), plus `win_reward` when the game is won, minus `revisit_penalty` (`revisit`
component) for a command that brings back a state of the game seen before in the episode. Admissible commands come
from TextWorld; a command outside that list is not sent to the game (it could hang the interpreter
on garbage) but answered with what was wrong. The oracle follows the game's walkthrough and, with
`replan=True`, TextWorld's own planner once the agent has left it.
"""
from __future__ import annotations

import re
from contextlib import contextmanager
import warnings
from pathlib import Path
from typing import Any

from agentgym.core import TextEnv, make_info
from agentgym.envs.textworld.expert import TextWorldExpert
from agentgym.envs.textworld.games import TEXTWORLD_LOCK, GameSpec, game_path
from agentgym.errors import ConfigError, require
from agentgym.revisits import checked_penalty, penalise_revisit
from agentgym.tools import extract_tag

MAX_ACTION_CHARS = 4000
_PROMPT_LINE = re.compile(r"^\s*>.*$", re.M)  # the interpreter's prompt and status bar
_GAP = re.compile(r"\n{3,}")
_END = "Would you like to RESTART"
_ARTICLES = re.compile(r"\b(?:the|a|an|some) ")


@contextmanager
def _quiet_jericho():
    """Jericho warns that it cannot track score or walkthroughs of TextWorld games; TextWorld does both."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module="jericho")
        yield


def clean_feedback(text: str) -> str:
    """Game text without the prompt line, status bar, end-of-game menu and extra blank lines."""
    text = text.split(_END, 1)[0]
    text = _PROMPT_LINE.sub("", text)
    return _GAP.sub("\n\n", text).strip()


class TextWorldEnv(TextEnv):
    action_listing = "all"  # the game's admissible commands (agentgym/action_listing.py)

    def __init__(self, game: str | None = None, world_size: int = 3, nb_objects: int = 5, quest_length: int = 3,
                 challenge: str | None = None, settings: dict[str, Any] | None = None, game_pool: int | None = None,
                 cache_dir: str | None = None, score_reward: float = 1.0, win_reward: float = 0.0,
                 anchor: str = "observation", list_actions: bool = False, replan: bool = False,
                 revisit_penalty: float = 0.0):
        if anchor not in ("observation", "state"):
            raise ConfigError(f"anchor must be 'observation' or 'state', got {anchor!r}")
        if game is not None and not Path(game).is_file():
            raise ConfigError(f"TextWorld game file {game!r} not found; pass a .z8 or .ulx file")
        if game_pool is not None and game_pool < 1:
            raise ConfigError(f"game_pool must be >= 1, got {game_pool}")
        self.game = game
        self.game_spec = None if game else GameSpec(world_size, nb_objects, quest_length, challenge,
                                               tuple(sorted((settings or {}).items())))
        self.game_pool, self.cache_dir = game_pool, cache_dir
        self.score_reward, self.win_reward = float(score_reward), float(win_reward)
        self.revisit_penalty = checked_penalty(revisit_penalty)
        self.anchor_mode, self.list_actions, self.replan = anchor, list_actions, replan
        self._tw = None
        self._file: str | None = None
        self._state = None
        self._done = False
        self._history: list[str] = []
        self._visited: set[str] = set()  # the game's facts of every state this episode (revisit_penalty)
        self._expert = TextWorldExpert()  # fed what the agent is shown (expert_action)

    @property
    def instructions(self) -> str:
        return ("You are playing a text adventure game. Read what you see and reach the goal you are given. "
                "Each turn, reply with exactly one command (e.g. 'go north', 'open door', 'take key from box'), "
                "for example inside <action></action> tags.")

    # ------------------------------------------------------------------ lifecycle
    def _infos(self):
        textworld = require("textworld", "textworld")
        return textworld.EnvInfos(admissible_commands=True, extras=["walkthrough"], score=True, max_score=True,
                                  won=True, lost=True, objective=True, description=True, inventory=True,
                                  policy_commands=self.replan,
                                  facts=self.anchor_mode == "state" or self.revisit_penalty > 0)

    def _open(self, path: str) -> None:
        if self._tw is not None and self._file == path:
            return
        textworld = require("textworld", "textworld")
        self.close()
        with _quiet_jericho(), TEXTWORLD_LOCK:
            try:
                self._tw = textworld.start(path, request_infos=self._infos())
            except NotImplementedError as exc:  # Glulx (.ulx) games: TextWorld >= 1.7 dropped their interpreter
                raise ConfigError(f"cannot play {path!r} with textworld {textworld.__version__}: {exc} "
                                  "(pip install 'textworld<1.7' for .ulx games, or use a .z8 game)") from exc
            except ValueError as exc:
                raise ConfigError(f"cannot play {path!r}: {exc}; TextWorld plays .z1-.z8 games") from exc
        self._file = path

    def _game_for(self, seed: int) -> str:
        if self.game is not None:
            return self.game
        return str(game_path(self.game_spec, seed, self.cache_dir))

    def _game_seed(self, seed: int | None, split: str) -> int:
        """The generator seed of reset `seed`'s game. With `game_pool=N` the train split cycles the games of
        reset seeds 0..N-1 (compiled once, then cached); other splits keep one game per reset seed, and a
        held-out seed inside the pool is refused, so held-out games are never trained on."""
        if self.game_pool and split == "train":
            index = seed if seed is not None else int(self.np_random.integers(0, 2**31 - 1))
            return _generator_seed(index % self.game_pool)
        if self.game_pool and seed is not None and 0 <= seed < self.game_pool:
            raise ConfigError(f"held-out ({split}) reset seed {seed} is one of the training pool's games "
                              f"(game_pool={self.game_pool}: seeds 0..{self.game_pool - 1}); evaluate on seeds "
                              f">= {self.game_pool} (eval.seed_start)")
        return int(self.np_random.integers(0, 2**31 - 1))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        game_seed = self._game_seed(seed, str(options.get("split", "train")))
        if "task_id" in options:
            game_seed = _seed_from_task_id(str(options["task_id"]))
        path = str(options["game"]) if "game" in options else self._game_for(game_seed)
        self._open(path)
        with _quiet_jericho(), TEXTWORLD_LOCK:  # reset loads the game file
            self._state = state = self._tw.reset()
        self._done, self._history, self._score = False, [], int(state.score or 0)
        self._visited = {self._state_key()} if self.revisit_penalty else set()
        self._expert = TextWorldExpert()
        self.task_id = f"textworld/{Path(path).stem}" + ("" if self.game or "game" in options else f"/{game_seed}")
        obs = f"{state.objective}\n\n{clean_feedback(state.description)}".strip()
        return self._finish(obs, make_info(valid_action=True, task_id=self.task_id))

    def close(self) -> None:
        if self._tw is not None:
            self._tw.close()
        self._tw, self._file = None, None

    # ------------------------------------------------------------------ stepping
    def step(self, action: str):
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            obs = "The game is over; reset the environment to play again."
            return self._finish_step(obs, {}, valid=False)
        command = _command_text(action)
        admissible = self._state.admissible_commands or []
        if command not in admissible:  # "take the key from the box" -> "take key from box"
            command = next((a for a in admissible if _ARTICLES.sub("", a.lower()) == _ARTICLES.sub("", command)),
                           command)  # the command is lowercased; the game's names may not be ("Advent Calendar")
        if command not in admissible:
            return self._finish_step(self._invalid(command, admissible), {}, valid=False)
        with _quiet_jericho():
            self._state, _, done = self._tw.step(command)
        self._history.append(command)
        score = int(self._state.score or 0)
        components = {"score": (score - self._score) * self.score_reward} if score != self._score else {}
        self._score = score
        won = bool(self._state.won)
        if won and self.win_reward:
            components["outcome"] = self.win_reward
        self._penalise_revisit(components)
        self._done = bool(done or won or self._state.lost)
        return self._finish_step(clean_feedback(self._state.feedback), components, valid=True)

    def _state_key(self) -> str:
        return "|".join(sorted(map(str, self._state.facts or [])))

    def _penalise_revisit(self, components: dict[str, float]) -> None:
        # a command that changed nothing (look, inventory, examine) or undid the one before (lock after unlock,
        # walk back) brings back a known state: the loops a small model falls into, told apart from progress
        if not self.revisit_penalty:
            return
        penalise_revisit(self._visited, self._state_key(), self.revisit_penalty, components)

    def _invalid(self, command: str, admissible: list[str]) -> str:
        if not command:
            return "Nothing happens. Your action was empty. Reply with one command."
        shown = command if len(command) <= 60 else command[:57] + "..."
        examples = ", ".join(admissible[:6])
        return f'Nothing happens. "{shown}" is not a command you can use here. Try one of: {examples}.'

    def _finish_step(self, obs: str, components: dict[str, float], valid: bool):
        won = bool(self._state.won)
        info = make_info(success=won, valid_action=valid, reward_components=components, task_id=self.task_id,
                         score=self._score, max_score=self._state.max_score)
        obs, info = self._finish(obs, info)
        return obs, float(sum(components.values())), self._done, False, info

    def _finish(self, obs: str, info: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        acts = [] if self._done else list(self._state.admissible_commands or [])
        self._expert.observe(obs)
        if self.list_actions and acts:
            obs += "\nAdmissible actions: " + ", ".join(acts)
        info["admissible_actions"] = acts
        if self.anchor_mode == "state":
            info["anchor"] = self._state_key()
        self._last_obs = obs
        return obs, self.finish_info(obs, info)

    # ------------------------------------------------------------------ oracle
    def oracle_plan(self) -> list[str]:
        """The rest of the walkthrough while the agent has followed it; else TextWorld's plan (replan=True)."""
        if self._state is None or self._done:
            return []
        walkthrough = list(self._state.get("extra.walkthrough") or [])
        if walkthrough[: len(self._history)] == self._history:
            return walkthrough[len(self._history):]
        return list(self._state.policy_commands or []) if self.replan else []

    def oracle_action(self) -> str | None:
        plan = self.oracle_plan()
        return plan[0] if plan else None

    def expert_action(self) -> str | None:
        """The fair player's command (expert.py): from the objective, the game text and the admissible
        commands only, never the walkthrough or the game's facts. None: nothing left to try."""
        if self._state is None or self._done:
            return None
        return self._expert.act(list(self._state.admissible_commands or []))

    def render(self) -> str | None:
        if self._state is None:
            return None
        return f"{getattr(self, '_last_obs', '')}\n\n[score {self._score}/{self._state.max_score}]"


def _command_text(action: Any) -> str:
    """The command in a reply (an <action> tag, else the last non-empty line), in TextWorld's form."""
    text = (action if isinstance(action, str) else str(action))[-MAX_ACTION_CHARS:]
    tagged = extract_tag(text, "action")
    if tagged is None:
        lines = [line for line in text.splitlines() if line.strip()]
        tagged = lines[-1] if lines else ""
    command = " ".join(tagged[:300].lower().split()).lstrip("> ").rstrip(" .!")
    return command if command.isprintable() else "".join(ch for ch in command if ch.isprintable())


def _generator_seed(reset_seed: int) -> int:
    """The game seed `reset(seed=reset_seed)` draws without a pool (gymnasium seeds np_random this way)."""
    import numpy as np

    return int(np.random.default_rng(reset_seed).integers(0, 2**31 - 1))


def _seed_from_task_id(task_id: str) -> int:
    tail = task_id.rsplit("/", 1)[-1]
    if not task_id.startswith("textworld/") or not tail.isdigit():
        raise ConfigError(f"bad TextWorld task_id {task_id!r}; expected 'textworld/<game>/<seed>'")
    return int(tail)
