"""A fair TextWorld player: it acts on the game's text and admissible commands, never the walkthrough.

The oracle (`TextWorldEnv.oracle_action`) replays the game's recorded walkthrough; a model cloned from it
never sees what to do when the next step is not at hand. `TextWorldExpert` reads the objective the game
states at the start ("First, go east. Then take the passkey from the bookshelf ...") and, each turn,
plays the admissible command that carries out the earliest step not yet done (its verb and nouns appear in
the step's sentence). When no step can be carried out here, it explores as a player would: picks up
keys it sees, opens closed things, walks through exits not yet tried (rooms are told apart by their
"-= Room =-" header), and walks back when a room is exhausted.

    expert = TextWorldExpert()
    expert.observe(first_observation)            # then observe(obs) after every step
    command = expert.act(admissible_commands)    # None: nothing left to try (no path)
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

_ROOM = re.compile(r"-= (.+?) =-")
_WORD = re.compile(r"[a-z0-9'-]+")
_DIRECTIONS = ("north", "south", "east", "west")
_OPPOSITE = {"north": "south", "south": "north", "east": "west", "west": "east"}
# the words a step's sentence uses for each command verb
# (TextWorld's grammar, textworld/generator/data/text_grammars/house_instruction.twg: put_syn "sit", insert_syn
# "deposit", drop_syn "ditch/throw/toss")
_VERBS = {"go": ("go", "move", "head", "travel", "walk", "venture", "attempt", "try"),
          "take": ("take", "pick", "pick-up", "retrieve", "grab", "get", "recover", "lift"),
          "insert": ("insert", "inserted", "put", "place", "placed", "deposit", "deposited", "drop", "rest", "stow",
                     "set"),
          "put": ("put", "place", "placed", "sit", "rest", "set", "drop", "stow", "insert"),
          "unlock": ("unlock", "unlocked", "unlocking"),
          "lock": ("lock", "locked"),
          "open": ("open", "opened", "opening"),
          "close": ("close", "closed", "shut"),
          "eat": ("eat", "eaten", "consume"),
          "drop": ("drop", "discard", "ditch", "throw", "toss", "deposit", "put", "place")}
_GLUE = {"from", "into", "on", "with", "in", "the", "a", "an"}
_KEYS = ("key", "keycard", "passkey", "latchkey")


def words(text: str) -> set[str]:
    """Lowercase words, possessives cut ("the chest's lock" names the chest)."""
    return {w.removesuffix("'s") for w in _WORD.findall(text.lower())}


def split_steps(objective: str) -> list[str]:
    """The objective's sentences after its greeting, each one step (sentences without a verb are dropped)."""
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", objective) if s.strip()]
    verbs = {v for vs in _VERBS.values() for v in vs if v not in ("try", "attempt", "set")}  # "rest the X on Y" is a step
    return [s for s in sentences if words(s) & verbs or words(s) & set(_DIRECTIONS)]


def carries_out(command: str, step: str) -> bool:
    """Does `command` do what the sentence `step` asks? Its verb (or a synonym) and its nouns are in it;
    for "unlock/lock X with K" the key may go unnamed ("make sure the safe is unlocked")."""
    verb, *rest = command.lower().split()
    said = words(step)
    if verb not in _VERBS or not said & set(_VERBS[verb]) and verb != "go":
        return False
    nouns = rest
    if verb in ("unlock", "lock") and "with" in rest:
        nouns = rest[: rest.index("with")]
    content = words(" ".join(nouns)) - _GLUE
    return bool(content) and content <= said


@dataclass
class TextWorldExpert:
    """Scripted player over the game text and admissible commands (see the module docstring)."""

    steps: list[str] = field(default_factory=list)
    done: list[bool] = field(default_factory=list)
    room: str = ""
    tried: dict[str, set[str]] = field(default_factory=dict)      # room -> exits walked through
    opened: dict[str, set[str]] = field(default_factory=dict)     # room -> things opened there
    came_by: dict[str, str] = field(default_factory=dict)         # room -> the exit back to where we came from
    last: str = ""
    started: bool = False

    def observe(self, observation: str) -> None:
        if not self.started:  # the first observation: the objective, then the first room
            self.started = True
            objective = observation.split("-=", 1)[0]
            self.steps = split_steps(objective)
            self.done = [False] * len(self.steps)
        room = _ROOM.search(observation)
        if room and room.group(1) != self.room:
            previous, self.room = self.room, room.group(1)
            if previous and self.last.startswith("go ") and self.room not in self.came_by:
                self.came_by[self.room] = f"go {_OPPOSITE.get(self.last[3:], self.last[3:])}"

    def act(self, admissible: list[str]) -> str | None:
        acts = [a for a in admissible if a not in ("look", "inventory") and not a.startswith("examine ")]
        command = self._step(acts) or self._explore(acts)
        self.last = command or ""
        return command

    def _step(self, acts: list[str]) -> str | None:
        for i, step in enumerate(self.steps):
            if self.done[i]:
                continue
            matches = [a for a in acts if carries_out(a, step)]
            if matches:
                self.done[i] = True
                return max(matches, key=lambda a: len(words(a) & words(step)))
        return None

    def _explore(self, acts: list[str]) -> str | None:
        key = next((a for a in acts if a.startswith("take ") and words(a) & set(_KEYS)), None)
        if key:
            return key
        opened = self.opened.setdefault(self.room, set())
        for a in acts:
            if a.startswith("open ") and a not in opened:
                opened.add(a)
                return a
        tried = self.tried.setdefault(self.room, set())
        back = self.came_by.get(self.room)
        for a in acts:
            if a.startswith("go ") and a not in tried and a != back:
                tried.add(a)
                return a
        if back and back in acts:
            return back
        exits = [a for a in acts if a.startswith("go ")]
        return exits[0] if exits else None
