"""Generate TextWorld games from a seed with TextWorld's own generator, cached on disk.

Games are compiled once into a cache directory (never the repo): `$AGENTGYM_CACHE/textworld`,
default `~/.cache/agentgym/textworld`. The file name holds every generation parameter and the seed,
so the same (spec, seed) always maps to the same file. Compilation goes to a private temporary
folder and is moved in place atomically, so parallel workers never see a half-written game.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

from agentgym.errors import ConfigError, require

# TextWorld parses game logic with one shared TatSu parser, which is not thread-safe: games generated or
# loaded in threads at once (rollout.executor=thread) failed with "IndexError: pop from empty list"
TEXTWORLD_LOCK = threading.Lock()

# TextWorld's challenges and the settings they are generated with unless a spec overrides them
CHALLENGES = {
    "tw-simple": {"rewards": "dense", "goal": "detailed", "test": False},
    "tw-coin_collector": {"level": 1},
    "tw-treasure_hunter": {"level": 1},
    "tw-cooking": {"recipe": 1, "take": 1, "go": 1, "open": True, "cook": False, "cut": False, "drop": False,
                   "recipe_seed": 0, "split": None},
}


@dataclass(frozen=True)
class GameSpec:
    """What game to generate. `challenge=None` is TextWorld's custom generator (rooms/objects/quest
    length); otherwise one of TextWorld's challenges with its `settings` (e.g. {"rewards": "dense"})."""

    world_size: int = 3
    nb_objects: int = 5
    quest_length: int = 3
    challenge: str | None = None
    settings: tuple[tuple[str, object], ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if self.challenge is not None and self.challenge not in CHALLENGES:
            raise ConfigError(f"unknown TextWorld challenge {self.challenge!r}; choose from {', '.join(CHALLENGES)}")
        if self.challenge is None and not (1 <= self.world_size <= 20 and 0 <= self.nb_objects <= 50
                                           and 1 <= self.quest_length <= 20):
            raise ConfigError("TextWorld custom games need 1 <= world_size <= 20, 0 <= nb_objects <= 50, "
                              f"1 <= quest_length <= 20; got {self.world_size}, {self.nb_objects}, "
                              f"{self.quest_length}")

    def key(self) -> str:
        """A short stable name for this spec (part of the cached file name)."""
        blob = json.dumps(asdict(self), sort_keys=True, default=str).encode()
        name = self.challenge or f"custom-r{self.world_size}-o{self.nb_objects}-q{self.quest_length}"
        return f"{name}-{hashlib.sha1(blob).hexdigest()[:8]}"


def cache_dir(override: str | os.PathLike | None = None) -> Path:
    root = Path(override) if override else Path(os.environ.get("AGENTGYM_CACHE", Path.home() / ".cache" / "agentgym"))
    path = root / "textworld" if not override else root
    path.mkdir(parents=True, exist_ok=True)
    return path


def game_path(spec: GameSpec, seed: int, directory: str | os.PathLike | None = None) -> Path:
    """The cached game file of (spec, seed), generating and compiling it first if needed."""
    folder = cache_dir(directory)
    target = folder / f"{spec.key()}-s{seed}.z8"
    if target.is_file() and target.with_suffix(".json").is_file():
        return target
    tmp = Path(tempfile.mkdtemp(prefix=".gen-", dir=folder))
    try:
        with warnings.catch_warnings(), TEXTWORLD_LOCK:  # jericho's notes while TextWorld records walkthroughs
            warnings.filterwarnings("ignore", module="jericho")
            built = _compile(spec, seed, tmp / target.name)
        os.replace(built.with_suffix(".json"), target.with_suffix(".json"))  # the .z8 last: it marks "done"
        os.replace(built, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _compile(spec: GameSpec, seed: int, path: Path) -> Path:
    textworld = require("textworld", "textworld")
    from textworld.generator import compile_game, make_game

    options = textworld.GameOptions()
    options.seeds = int(seed)
    options.path = str(path)
    options.force_recompile = True
    if spec.challenge is None:
        options.nb_rooms, options.nb_objects, options.quest_length = spec.world_size, spec.nb_objects, spec.quest_length
        game = make_game(options)
    else:
        from textworld import challenges

        settings = {**CHALLENGES[spec.challenge], **dict(spec.settings)}
        game = challenges.CHALLENGES[spec.challenge][1](settings, options)
    return Path(compile_game(game, options))
