"""`ScienceWorldEnv`: the ScienceWorld benchmark (Wang et al., 2022) as an agentgym text env.

One task per env id; the reset seed picks a variation from the benchmark's own train/dev/test split
(`options["split"]`, default the env's `split`). Each turn's reward is the change of the simulator's
score (0-100, times `score_scale`); success is a completed task with score 100; a score below zero
(e.g. focusing on the wrong object) ends the episode as a failure. Admissible actions are the
simulator's valid action-object combinations (`valid_actions=True`, ~85 ms a step on one core; switch
them off for speed; `action_filter`, a regex, lists only the valid actions it matches: the
classification preset keeps the ~50 of ~400 a find-X task can use, while a typed command still reaches
the simulator). The anchor is the simulator's state: room, inventory and score; `revisit_penalty` (off
by default) subtracts that much (component `revisit`) for an accepted action that shows nothing new: the
state and the simulator's answer both seen before this episode (looking twice, teleporting back to a room
seen, a move that moved nothing). The oracle
follows the simulator's gold action sequence, generated on first use (the simulator is deterministic,
so it reloads the variation with the gold path and replays the episode so far). A gold step the replayed
world rejects is skipped, not repeated: in the two mendelian-genetics tasks pollination is random, so the
replay can grow other seeds than the ones the gold path harvests by name; the path still ends with the
answer the simulator's own experiment reached (`tasks.RANDOM_OUTCOME` gives the success that reaches).
"""
from __future__ import annotations

import difflib
import re
from typing import Any

from agentgym.core import TextEnv, make_info
from agentgym.envs.scienceworld.expert import TASKS as EXPERT_TASKS, ClassifyExpert
from agentgym.envs.scienceworld.simulator import Simulator, simulator_errors
from agentgym.envs.scienceworld.tasks import TASK_NAMES
from agentgym.errors import ConfigError
from agentgym.revisits import checked_penalty, penalise_revisit
from agentgym.tools import extract_tag

MAX_COMMAND_CHARS = 300


def seed_simulator(sim: Simulator, seed: int) -> None:
    """Seed the JVM's shared `scala.util.Random` before a load, so what a variation draws at random
    (plant genetics, pollination) is the same in every process."""
    try:
        random_module = getattr(getattr(sim._gateway.jvm.scala.util, "Random$"), "MODULE$")
        random_module.setSeed(int(seed))
    except Exception:  # another simulator build: its listings are still canonical
        pass
_INVALID = ("No known action matches that input.", "Unknown action.")
_AMBIGUOUS = "Ambiguous request"
SPLITS = {"train": "train", "dev": "dev", "valid": "dev", "validation": "dev", "val": "dev",
          "test": "test", "test_unseen": "test", "eval": "test"}
SIMPLIFICATIONS = ("easy", "teleportAction", "selfWateringFlowerPots", "openContainers", "openDoors",
                   "noElectricalAction")
_VARIATIONS: dict[tuple[str, str], tuple[int, ...]] = {}  # (task, split) -> variations; fixed per task


def split_name(split: str) -> str:
    """The benchmark split for a split name (train / dev / test and their usual aliases)."""
    if split not in SPLITS:
        raise ConfigError(f"unknown ScienceWorld split {split!r}; use one of train, dev, test")
    return SPLITS[split]


class ScienceWorldEnv(TextEnv):
    @staticmethod
    def action_listing(kwargs: dict[str, Any]) -> str:
        """The simulator's valid actions are listed only with valid_actions=True (agentgym/action_listing.py)."""
        return "all" if kwargs.get("valid_actions", True) else "none"

    def __init__(self, task: str = "boil", split: str = "train", simplifications: str = "",
                 valid_actions: bool = True, list_actions: bool = False, score_scale: float = 0.01,
                 anchor: str = "state", action_filter: str = "", revisit_penalty: float = 0.0):
        if task not in TASK_NAMES:
            close = difflib.get_close_matches(task, TASK_NAMES, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown ScienceWorld task {task!r}.{hint} Tasks: {', '.join(TASK_NAMES)}")
        unknown = [x for x in simplifications.split(",") if x and x not in SIMPLIFICATIONS]
        if unknown:
            raise ConfigError(f"unknown ScienceWorld simplification(s) {unknown}; use a comma-separated subset of "
                              f"{', '.join(SIMPLIFICATIONS)}")
        self.action_filter = _compile_filter(action_filter)
        if anchor not in ("state", "observation"):
            raise ConfigError(f"anchor must be 'state' or 'observation', got {anchor!r}")
        self.task, self.split = task, split_name(split)
        self.simplifications = simplifications
        self.valid_actions, self.list_actions = valid_actions, list_actions
        self.score_scale, self.anchor_mode = float(score_scale), anchor
        self.revisit_penalty = checked_penalty(revisit_penalty)
        self._visited: set[str] = set()  # (anchor, simulator's answer) pairs of this episode (revisit_penalty)
        self._sim: Simulator | None = None
        self._loaded: tuple[int, bool] | None = None  # (variation, with gold path) the simulator holds
        self._variation: int | None = None
        self._gold: list[str] | None = None
        self._history: list[str] = []
        self._skipped: frozenset[int] = frozenset()  # gold-path steps this episode's world rejected
        self._score, self._done = 0, True
        self._cached: tuple[list[str], str] | None = None  # (admissible actions, anchor) of the current state
        self._templates: list[str] | None = None
        self._awaiting_choice = False  # the simulator asked "Ambiguous request: ... enter the number"
        self.task_id = ""
        self._expert = ClassifyExpert()  # fed what the agent is shown (expert_action)

    @property
    def instructions(self) -> str:
        return ("You are an agent in ScienceWorld, a text-based science simulator with rooms, objects, "
                "substances and devices. Read the task and act to complete it. Each turn, reply with exactly "
                "one action, such as 'look around', 'open door to kitchen', 'go to kitchen', 'pick up "
                "thermometer', 'move metal pot to stove', 'activate stove', 'use thermometer on water', "
                "'wait1' or 'focus on water'. Focus only on what the task names: focusing on the wrong thing "
                "fails the task. You may put the action inside <action></action> tags.")

    # ------------------------------------------------------------------ simulator lifecycle
    def _simulator(self) -> Simulator:
        if self._sim is not None and not self._sim.alive():
            self._drop_simulator()
        if self._sim is None:
            self._sim = Simulator()
        return self._sim

    def _drop_simulator(self) -> None:
        if self._sim is not None:
            self._sim.close()
        self._sim, self._loaded, self._gold = None, None, None

    def _load(self, variation: int, gold: bool = False) -> None:
        if self._loaded != (variation, gold) and not (gold is False and self._loaded == (variation, True)):
            sim = self._simulator()
            seed_simulator(sim, variation)
            sim.server.load(self.task, variation, self.simplifications, gold)
            self._loaded = (variation, gold)
            self._gold = list(self._sim.server.getGoldActionSequence()) if gold else None

    def variations(self, split: str | None = None) -> tuple[int, ...]:
        """The benchmark's variation indices of this task in a split (asks the simulator once per process)."""
        key = (self.task, split_name(split or self.split))
        if key not in _VARIATIONS:
            sim = self._simulator()
            if self._loaded is None:
                sim.server.load(self.task, 0, self.simplifications, False)
                self._loaded = (0, False)
            server = sim.server
            for name, fetch in (("train", server.getVariationsTrain), ("dev", server.getVariationsDev),
                                ("test", server.getVariationsTest)):
                _VARIATIONS[(self.task, name)] = tuple(int(v) for v in fetch())
        return _VARIATIONS[key]

    def close(self) -> None:
        self._drop_simulator()
        self._done = True

    # ------------------------------------------------------------------ reset / step
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        for attempt in (1, 2):  # a JVM that died between episodes is replaced once
            try:
                return self._reset(seed, options)
            except simulator_errors():
                self._drop_simulator()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _reset(self, seed: int | None, options: dict[str, Any]):
        if "task_id" in options:
            variation = self._variation_from_task_id(str(options["task_id"]))
        else:
            pool = self.variations(options.get("split", self.split))
            index = seed if seed is not None else int(self.np_random.integers(0, 2**31 - 1))
            variation = pool[index % len(pool)]
        self._loaded = None  # a fresh load every episode: nothing of the last one carries over
        self._load(variation)
        server = self._sim.server
        seed_simulator(self._simulator(), variation)  # reset() draws again: from the same seed
        server.reset()
        look = str(server.step("look around"))
        self._variation, self._history, self._score, self._done = variation, [], 0, False
        self._skipped = frozenset()
        self._cached, self._awaiting_choice = None, False
        self.task_id = f"scienceworld/{self.task}/{variation}"
        obs = f"{server.freeActionTaskDesc()}\n\n{look}".strip()
        obs, info = self._finish(obs, make_info(task_id=self.task_id, variation=variation))
        self._visited = {_revisit_key(self._cached[1], look)} if self._cached else set()
        return obs, info

    def _variation_from_task_id(self, task_id: str) -> int:
        parts = task_id.split("/")
        if len(parts) != 3 or parts[0] != "scienceworld" or parts[1] != self.task or not parts[2].isdigit():
            raise ConfigError(f"bad task_id {task_id!r} for this env; expected 'scienceworld/{self.task}/<variation>'")
        return int(parts[2])

    def step(self, action: str):
        if self._variation is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            return self._step_result("The episode is over; reset the environment to play again.", {}, valid=False)
        command = command_text(action)
        if not command:
            return self._step_result("Your action was empty. Reply with one action, e.g. 'look around'.", {},
                                     valid=False)
        try:
            text = str(self._sim.server.step(command))
            score = int(round(100 * float(self._sim.server.getScore())))
            completed = bool(self._sim.server.getCompleted())
        except simulator_errors() as exc:
            return self._crashed(exc)
        valid = not text.startswith(_INVALID)
        if valid:
            self._history.append(command)
            self._awaiting_choice = text.startswith(_AMBIGUOUS)
        else:
            self._skip_rejected_gold_step(command)
            text = self._invalid_hint(command, text)
        delta, self._score = score - self._score, score
        components = {"score": delta * self.score_scale} if delta else {}
        self._done = completed or score < 0
        return self._step_result(text.strip(), components, valid=valid)

    def _invalid_hint(self, command: str, text: str) -> str:
        shown = command if len(command) <= 60 else command[:57] + "..."
        if self._templates is None:
            try:
                self._templates = sorted(str(t) for t in self._sim.server.getPossibleActions())
            except simulator_errors():
                return f'{text} "{shown}" is not an action here.'
        return (f'{text} "{shown}" is not an action here. Actions follow these templates (OBJ and LOC are '
                f"things you see): {', '.join(self._templates)}.")

    def _crashed(self, exc: BaseException):
        """A dead (or throwing) simulator fails this episode; the next reset starts a fresh JVM if needed."""
        self._done = True
        if self._sim is not None and not self._sim.alive():
            self._drop_simulator()
        obs = (f"The ScienceWorld simulator failed ({type(exc).__name__}); this episode is over and counts as "
               "a failure. Reset the environment to start a new one.")
        info = make_info(success=False, valid_action=True, task_id=self.task_id, score=self._score,
                         crashed=True, error=str(exc)[:500])
        self._last_obs = obs
        return obs, 0.0, True, False, self.finish_info(obs, info)

    def _step_result(self, obs: str, components: dict[str, float], valid: bool):
        success = self._done and self._score >= 100
        try:
            if valid:  # the new state, before the reward: a revisit is judged on it
                self._cached = self._query_state()
                self._penalise_revisit(components, self._cached[1], obs)
            info = make_info(success=success, valid_action=valid, reward_components=components,
                             task_id=self.task_id, score=self._score, variation=self._variation)
            obs, info = self._finish(obs, info)
        except simulator_errors() as exc:
            return self._crashed(exc)
        return obs, float(sum(components.values())), self._done, False, info

    def _penalise_revisit(self, components: dict[str, float], anchor: str, answer: str) -> None:
        # the loops a small model falls into here (teleporting back to rooms it has seen, repeating a move that
        # moves nothing) bring back a known state with a known answer. The answer counts too: a teleport
        # says only "You teleport to X", so the `look around` after it shows something new in an unchanged
        # state. A question the parser asks back is not a revisit.
        if not self.revisit_penalty or self._awaiting_choice:
            return
        penalise_revisit(self._visited, _revisit_key(anchor, answer), self.revisit_penalty, components)

    def _finish(self, obs: str, info: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Admissible actions and anchor of the current state, asked of the simulator once a state (`_cached`:
        reset clears it, an accepted step refreshes it, a step the parser rejected keeps it)."""
        if self._cached is None:
            self._cached = self._query_state()
        actions, anchor = self._cached
        self._expert.observe(obs)
        if self.list_actions and actions:
            obs += "\nValid actions: " + ", ".join(actions)
        if self.valid_actions:
            info["admissible_actions"] = list(actions)
        if self.anchor_mode == "state":
            info["anchor"] = anchor
        self._last_obs = obs
        return obs, self.finish_info(obs, info)

    def _query_state(self) -> tuple[list[str], str]:
        """(admissible actions, anchor) of the simulator's current state."""
        server = self._sim.server
        actions = sorted(str(a) for a in server.getValidActionObjectCombinations()) \
            if self.valid_actions and not self._done else []
        if self.action_filter is not None:
            actions = [a for a in actions if self.action_filter.search(a)]
        anchor = "\n".join((self.task_id, f"score {self._score}", str(server.freeActionLook()),
                            str(server.freeActionInventory())))
        return actions, anchor

    def state_summary(self) -> str:
        """Where the agent is and what it holds (the fold layout's env summary), from free simulator queries."""
        if self._variation is None or self._sim is None or self._done:
            return ""
        try:
            look = str(self._sim.server.freeActionLook()).strip()
            inventory = str(self._sim.server.freeActionInventory()).strip()
        except simulator_errors():
            return ""
        room = look.splitlines()[0].split(" In it,")[0] if look else ""  # "This room is called the kitchen."
        return f"{room}\n{inventory}\nScore so far: {self._score}/100 after {len(self._history)} accepted actions."

    # ------------------------------------------------------------------ oracle
    def oracle_plan(self) -> list[str]:
        """The rest of the gold path while the agent has followed it, else []."""
        if self._done or self._variation is None:
            return []
        if self._gold is None:
            try:
                self._reload_with_gold_path()
            except simulator_errors():
                return []
        gold = self._gold_commands()
        i = _next_gold_step(self._history, gold, self._awaiting_choice, self._skipped)
        return [] if i is None else [g for j, g in enumerate(gold[i:], i) if j not in self._skipped]

    def _gold_commands(self) -> list[str]:
        return [command_text(g) for g in self._gold or []]

    def _skip_rejected_gold_step(self, command: str) -> None:
        """The simulator rejected `command`: if it is the gold path's next step, the oracle skips it from now on
        (a seed that pollination did not grow in this episode) instead of repeating it until the turn limit."""
        if self._gold is None:
            return
        gold = self._gold_commands()
        i = _next_gold_step(self._history, gold, self._awaiting_choice, self._skipped)
        if i is not None and i < len(gold) and gold[i] == command:
            self._skipped = self._skipped | {i}

    def _reload_with_gold_path(self) -> None:
        """Load the variation again with its gold path and replay this episode's accepted commands, asking
        the simulator what an episode asks after each (its valid actions, look, inventory): the simulator
        names objects as it is asked about them ("blue paint" / "blue paint in wood cup"), so a replay that
        skipped the questions left a world that answered the next step differently."""
        variation = int(self._variation or 0)  # oracle_plan asks only once an episode started
        self._load(variation, gold=True)
        server = self._sim.server
        seed_simulator(self._simulator(), variation)  # as _reset does
        server.reset()
        server.step("look around")
        self._cached = self._query_state()
        for command in self._history:
            text = str(server.step(command))
            self._awaiting_choice = text.startswith(_AMBIGUOUS)
            if not text.startswith(_INVALID):
                self._cached = self._query_state()

    def oracle_action(self) -> str | None:
        plan = self.oracle_plan()
        return plan[0] if plan else None

    def expert_action(self) -> str | None:
        """The fair expert's action (expert.py) on the classification tasks (find a living thing, ...): from
        the task, the rooms looked at and the admissible actions, never the gold path. None elsewhere."""
        if self.task not in EXPERT_TASKS or self._done or self._variation is None:
            return None
        return self._expert.act(list(self._cached[0]) if self._cached else [])

    def render(self) -> str | None:
        if self._variation is None:
            return None
        return f"{getattr(self, '_last_obs', '')}\n\n[{self.task_id} score {self._score}/100]"


def _revisit_key(anchor: str, answer: str) -> str:
    return f"{anchor}\n--\n{answer.strip()}"


# named action filters: the verbs the classification tasks (4-1..4-4) need, moves only into a box (the task
# says "move it to the <colour> box"): ~50 of the ~400-900 valid actions a turn
ACTION_FILTERS = {"classify": r"^(look around|teleport to |focus on |pick up |move .* to \w+ box$)"}


def _compile_filter(pattern: str) -> re.Pattern[str] | None:
    """The `action_filter` (a name in ACTION_FILTERS or a regex; "" lists every valid action), refused with the
    fix when it does not compile."""
    if not pattern:
        return None
    pattern = ACTION_FILTERS.get(pattern, pattern)
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"ScienceWorld action_filter {pattern!r} is not a regular expression ({exc}); give a "
                          f"Python regex matched against each valid action, or one of {', '.join(ACTION_FILTERS)}") \
            from None


def _next_gold_step(history: list[str], gold: list[str], awaiting_choice: bool,
                    skipped: frozenset[int] = frozenset()) -> int | None:
    """Where the gold path goes on after the commands played so far, or None once they left it. Gold paths
    hold the number answering an "Ambiguous request" where generating them met one; replaying does not
    always meet the same question, so an unasked-for number is passed over, as are the `skipped` steps
    (ones this episode's world rejected)."""
    i = 0

    def passable(j: int) -> bool:
        return j in skipped or gold[j].isdigit()

    for command in history:
        while i < len(gold) and gold[i] != command and passable(i):
            i += 1
        if i >= len(gold) or gold[i] != command:
            return None
        i += 1
    while i < len(gold) and (i in skipped or (not awaiting_choice and gold[i].isdigit())):
        i += 1
    return i


def _remaining(history: list[str], gold: list[str], awaiting_choice: bool) -> list[str]:
    """The gold path after the commands played so far, or [] once they left it."""
    i = _next_gold_step(history, gold, awaiting_choice)
    return [] if i is None else gold[i:]


_SPACES = re.compile(r"\s+")


def command_text(action: Any) -> str:
    """The command in a reply (an <action> tag, else the last non-empty line), cleaned for the simulator."""
    text = (action if isinstance(action, str) else str(action))[-4000:]
    tagged = extract_tag(text, "action")
    if tagged is None:
        lines = [line for line in text.splitlines() if line.strip()]
        tagged = lines[-1] if lines else ""
    tagged = tagged.encode("utf-8", "ignore").decode("utf-8")  # lone surrogates cannot cross py4j
    command = "".join(ch for ch in tagged[:MAX_COMMAND_CHARS] if ch.isprintable())
    return _SPACES.sub(" ", command).strip().lstrip("> ").rstrip(" .!").lower()
