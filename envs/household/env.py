"""`HouseholdEnv`: an ALFWorld-style household as an agentgym text env.

One room full of numbered receptacles and objects; six task types (pick & place, look at an object
under the desk lamp, clean/heat/cool & place, pick two & place). Rewards: `outcome` (scale
`success_reward`) when the goal holds; optionally `progress` for subgoals (found the object, holding
it, heated it, ...), `invalid` for inadmissible commands, `revisit` for a command that leaves the
world in a state it was already in this episode (a loop: take then put back, go back and forth) and
`wrong_take` for taking an object of another type than the task's.
Splits: `train`, `test_seen`, `test_unseen` (object/receptacle/room combinations never used in train).
"""
from __future__ import annotations

from typing import Any

from agentgym.core import TextEnv, make_info
from agentgym.envs.household import catalog as cat
from agentgym.envs.household import engine, oracle
from agentgym.envs.household.expert import FairExpert
from agentgym.envs.household.world import World, generate, knobs_for
from agentgym.errors import ConfigError
from agentgym.revisits import checked_penalty, penalise_revisit
from agentgym.tools import extract_tag

MAX_ACTION_CHARS = 4000  # only the tail of a huge action is read
GOAL_VERBS = frozenset({"put", "go", "take", "use"})  # the only operations that can make a goal hold


class HouseholdEnv(TextEnv):
    """ALFWorld-like household tasks. Reset options: `split`, `difficulty`, `task_type`, `task_id`."""

    # the world and the tables built from it are pickled together, so their shared objects stay shared
    snapshot_fields = ("world", "_gotos", "_go_ops", "_acts", "_achieved", "_done", "_expert", "_seen",
                       "_visited")

    def __init__(self, split: str = "train", task_types: tuple[str, ...] | str | None = None,
                 rooms: tuple[str, ...] | str | None = None, difficulty: str | None = None,
                 receptacle_scale: float | None = None, distractors: int | None = None,
                 success_reward: float = 1.0, progress_reward: float = 0.0, invalid_penalty: float = 0.0,
                 revisit_penalty: float = 0.0, wrong_take_penalty: float = 0.0, anchor: str = "observation",
                 list_actions: bool | str = False, remind_task: bool = False):
        split = cat.canonical_split(split)
        if split not in cat.SPLITS:
            raise ConfigError(f"unknown split {split!r}; choose from {', '.join(cat.SPLITS)} (or test = test_unseen)")
        if list_actions not in (False, True, "compact"):
            raise ConfigError(f"list_actions must be true, false or 'compact', got {list_actions!r}")
        if anchor not in ("observation", "state"):
            raise ConfigError(f"anchor must be 'observation' or 'state', got {anchor!r}")
        self.split = split
        self._knob_args = dict(task_types=task_types, rooms=rooms, receptacle_scale=receptacle_scale,
                               distractors=distractors)
        self.difficulty = difficulty
        self.knobs = knobs_for(difficulty, **self._knob_args)  # validates now, not at the first reset
        self.success_reward, self.progress_reward = float(success_reward), float(progress_reward)
        self.invalid_penalty, self.revisit_penalty = float(invalid_penalty), checked_penalty(revisit_penalty)
        self.wrong_take_penalty = float(wrong_take_penalty)
        if self.wrong_take_penalty < 0:
            raise ConfigError(f"wrong_take_penalty is subtracted, so it must be >= 0, got {wrong_take_penalty!r}")
        if not self.progress_reward:  # progress pays per subgoal reached, how many at once is open
            worst = -max(self.invalid_penalty, self.revisit_penalty + self.wrong_take_penalty)
            self.reward_range = (min(0.0, worst), max(0.0, self.success_reward))
        self.anchor_mode, self.list_actions = anchor, list_actions
        # restate the goal after every step's observation: a small model then finds the object and target
        # names next to what it sees instead of hundreds of tokens back (ALFWorld states it once)
        self.remind_task = bool(remind_task)
        self.world: World | None = None
        self._acts: dict[str, engine.Op] = {}
        self._achieved: set[str] = set()
        self._done = False
        self._seen: dict[int, str] = {}
        self._visited: set[str] = set()  # world.state_key() of every state this episode (revisit_penalty)
        self._expert = FairExpert()

    # ------------------------------------------------------------------ contract
    @property
    def instructions(self) -> str:
        return ("You are an agent in a household. Explore the room and complete the task given to you. "
                "Each turn, reply with exactly one command, for example inside <action></action> tags. "
                f"Commands: {engine.COMMAND_HELP}. Refer to things by their numbered names, e.g. "
                "\"take apple 1 from countertop 2\". You can carry one object at a time.")

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        split = cat.canonical_split(options.get("split", self.split))
        knobs = self.knobs
        if any(k in options for k in ("difficulty", "task_type", "task_types", "rooms", "distractors",
                                      "receptacle_scale")):
            args = {**self._knob_args, **{k: options[k] for k in ("rooms", "distractors", "receptacle_scale")
                                          if k in options}}
            if "task_type" in options or "task_types" in options:
                args["task_types"] = options.get("task_types", options.get("task_type"))
            knobs = knobs_for(options.get("difficulty", self.difficulty), **args)
        world_seed, combo = int(self.np_random.integers(0, 2**31 - 1)), None
        if "task_id" in options:
            split, world_seed, combo = _parse_task_id(str(options["task_id"]))
        self.world = w = generate(world_seed, split, knobs, combo)
        self._gotos, self._go_ops = engine.goto_tables(w)
        self._achieved, self._done = oracle.subgoals(w), False
        self._acts = engine.admissible(w, self._gotos, self._go_ops)
        self._seen = {}  # receptacle -> what the agent saw there last (state_summary)
        self._visited = {w.state_key()}
        obs = f"{engine.room_intro(w)}\n\nYour task is to: {w.task.goal}"
        # `split`: the one the task came from, after aliases (test -> test_unseen), for eval reports
        return self._finish(obs, make_info(valid_action=True, task_id=w.task.task_id, split=w.task.split))

    def step(self, action: str):
        w = self._require_world()
        if self._done:
            obs = "The episode is over; reset the environment to start a new task."
            obs, info = self._finish(obs, make_info(success=True, valid_action=False))
            return obs, 0.0, True, False, info
        op = self._acts.get(action) if isinstance(action, str) else None  # fast path: an exact admissible command
        why = ""
        if op is None:
            cmd = engine.normalize(_command_text(action))
            op = self._acts.get(cmd)
            if op is None:
                op, why = engine.parse(w, cmd)
                why = why or engine.check(w, op)
        components: dict[str, float] = {}
        if why:
            obs = f"Nothing happens. {why}"
            if self.invalid_penalty:
                components["invalid"] = -self.invalid_penalty
        else:
            held = w.holding
            obs = engine.execute(w, op)
            self._acts = engine.admissible(w, self._gotos, self._go_ops)
            if w.loc >= 0:
                self._seen[w.loc] = _contents(w, w.loc)
            self._reward_progress(w, components)
            self._penalise_revisit(w, components)
            self._penalise_wrong_take(w, held, components)
        success = not why and op[0] in GOAL_VERBS and oracle.success(w)
        if success:
            self._done = True
            components["outcome"] = self.success_reward
            obs += " You completed the task!"
        info = make_info(success=success, valid_action=not why, reward_components=components,
                         task_id=w.task.task_id)
        obs, info = self._finish(obs, info, remind=self.remind_task and not success)
        return obs, float(sum(components.values())), success, False, info

    def oracle_action(self) -> str | None:
        return oracle.oracle_command(self.world) if self.world is not None and not self._done else None

    def expert_action(self) -> str | None:
        """The fair expert's command (expert.py): chosen from the observations so far and the admissible
        commands only, never from the hidden world; the default demonstrator for behaviour cloning."""
        return self._expert.act(list(self._acts)) if self.world is not None and not self._done else None

    def oracle_plan(self) -> list[str]:
        """The oracle's whole plan from the current state (a demonstration); the env is not changed."""
        return oracle.plan(self._require_world())

    def state_summary(self) -> str:
        """Where the agent is, what it holds, and the receptacles it visited with what it saw there last."""
        if self.world is None:
            return ""
        w = self.world
        where = "the middle of the room" if w.loc < 0 else w.rname[w.loc]
        held = w.oname[w.holding] if w.holding >= 0 else "nothing"
        seen = "; ".join(f"{w.rname[r]}: {what}" for r, what in self._seen.items())
        return f"At {where}, holding {held}. Task: {w.task.goal}\nVisited: {seen or 'nothing yet'}"

    def render(self) -> str | None:
        if self.world is None:
            return None
        w = self.world
        where = "the middle of the room" if w.loc < 0 else w.rname[w.loc]
        held = w.oname[w.holding] if w.holding >= 0 else "nothing"
        return (f"{getattr(self, '_last_obs', '')}\n\n[task: {w.task.goal} | at: {where} | holding: {held}]\n"
                f"Admissible: {', '.join(self._acts)}")

    # ------------------------------------------------------------------ helpers
    def _require_world(self) -> World:
        if self.world is None:
            raise RuntimeError("call reset() before step()")
        return self.world

    def _reward_progress(self, w: World, components: dict[str, float]) -> None:
        if not self.progress_reward:
            return
        new = oracle.subgoals(w) - self._achieved
        if new:
            self._achieved |= new
            components["progress"] = self.progress_reward * len(new)

    def _penalise_revisit(self, w: World, components: dict[str, float]) -> None:
        # a valid command that changed nothing (look, examine) or undid what came before (put back what
        # was just taken, walk back to where nothing changed) brings back a known state: no progress
        penalise_revisit(self._visited, w.state_key(), self.revisit_penalty, components)

    def _penalise_wrong_take(self, w: World, held: int, components: dict[str, float]) -> None:
        # no task here needs an object of another type in hand: taking one is where a search that has not
        # found the object gives up (the agent then puts it in the target and loops; no eval episode with
        # such a take was solved, benchmarks/household_loops.py)
        took = w.holding >= 0 and w.holding != held
        if took and self.wrong_take_penalty and w.otype[w.holding] != w.task.obj_type:
            components["wrong_take"] = -self.wrong_take_penalty

    def _finish(self, obs: str, info: dict[str, Any], remind: bool = False) -> tuple[str, dict[str, Any]]:
        self._expert.observe(obs)  # before the listing is appended: it reads what the agent is told
        if remind:
            obs += f" (Task: {self._require_world().task.goal})"
        acts = list(self._acts) if not self._done else []
        if self.list_actions == "compact" and acts:
            # the "go to" commands repeat the room listing every turn: name only what else can be done here
            here = [a for a in acts if not a.startswith("go to ")]
            obs += "\nYou can also: go to any receptacle above" + (", " + ", ".join(here) if here else "") + "."
        elif self.list_actions and acts:
            obs += "\nAdmissible actions: " + ", ".join(acts)
        info["admissible_actions"] = acts
        if self.anchor_mode == "state":
            info["anchor"] = self.world.state_key()
        self._last_obs = obs
        return obs, self.finish_info(obs, info)


def _contents(w: World, recep: int) -> str:
    if not w.visible(recep):
        return "closed"
    return ", ".join(w.oname[o] for o in w.contents[recep]) or "empty"


def _command_text(action: Any) -> str:
    """The command in a model's reply: an <action> tag's content, else the last non-empty line."""
    text = action if isinstance(action, str) else str(action)
    text = text[-MAX_ACTION_CHARS:]
    tagged = extract_tag(text, "action")
    if tagged is not None:
        return tagged
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _parse_task_id(task_id: str) -> tuple[str, int, tuple[str, str, str, str]]:
    """(split, seed, (task type, room, object, receptacle)) from "household/SPLIT/TYPE/ROOM/OBJ/RECEP/SEED"."""
    parts = task_id.split("/")
    if len(parts) != 7 or parts[0] != "household" or parts[1] not in cat.SPLITS or not parts[6].isdigit() \
            or parts[2] not in cat.TASK_TYPES or parts[3] not in cat.ROOMS:
        raise ConfigError(f"bad household task_id {task_id!r}; expected "
                          "'household/<split>/<task type>/<room>/<object>/<receptacle>/<seed>' as in info['task_id']")
    return parts[1], int(parts[6]), (parts[2], parts[3], parts[4], parts[5])


def demonstrations(seeds: list[int], **env_kwargs: Any) -> list[list[tuple[str, str]]]:
    """Oracle demonstrations: per seed, the (observation, action) pairs of a successful episode."""
    env = HouseholdEnv(**env_kwargs)
    episodes = []
    for seed in seeds:
        obs, _ = env.reset(seed=seed)
        pairs = []
        for action in env.oracle_plan():
            pairs.append((obs, action))
            obs, _, _, _, _ = env.step(action)
        episodes.append(pairs)
    return episodes
