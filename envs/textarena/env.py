"""`TextArenaEnv`: a TextArena game (Guertler et al., 2025) as an agentgym text env.

The game is TextArena's raw env (no wrappers); the observation is only what the game told the agent
since its last move (the rules and first board on reset). Moves are TextArena's bracketed commands
(`[up]`, `[3 4]`, `[e2e4]`); a short reply without brackets is bracketed whole, as TextArena's own
`ActionFormattingWrapper` does. The game decides validity: a move it rejects is `valid_action=False`
(TextArena allows one retry per turn by default, so two bad moves in a row lose the game). The reward
is the game's outcome for the agent on the last turn (`outcome`: 1 a win, fractions for partial
progress, -1 a loss or forfeit); success is an outcome of 1. In two-player games the agent plays
`agent_player` against a fixed opponent (`opponent="random"`: a random move among the bracketed moves
the game shows the opponent, else a random legal-looking bracket). Each env keeps its own `random`
state, swapped in around every game call, so seeded episodes repeat even with envs stepping in threads.

`opponent="seats"` plays a two-player game with no built-in opponent: every player is a seat an outside
policy fills (agentgym/engine/multiagent.py). `num_seats` says how many; every info says whose turn it is
(`seat`) and the observation is what that seat was told since its own last move; the step that ends the
game pays each seat its outcome (`seat_rewards`, `seat_success`). Games whose legal moves can be read off
the board (`legal_moves.py`) list them as `admissible_actions` in this mode.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import random
import re
import threading
from typing import Any, Iterator

from agentgym.core import TextEnv, make_info
from agentgym.envs.textarena.catalog import GAMES
from agentgym.envs.textarena.legal_moves import legal_moves, lists_moves
from agentgym.errors import ConfigError, require
from agentgym.tools import extract_tag

MAX_MOVE_CHARS = 2000
MAX_BARE_MOVE_CHARS = 40
_RANDOM_LOCK = threading.RLock()  # TextArena games draw from the global `random`
_BRACKETED = re.compile(r"\[([^\[\]\n]{1,60})\]")
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")
OPPONENT_MOVES_PER_TURN = 20  # rejected moves the random opponent may retry in one turn
OPPONENT_MOVE_LIMIT = 1000  # opponent moves in a row before the game counts as stuck


OPPONENTS = ("random", "seats")


class TextArenaEnv(TextEnv):
    # the game object pickles whole (all 133 games of 0.7.4, checked after reset); its `random` state is ours
    snapshot_fields = ("_ta", "_rng_state", "_opponent_rng", "_opponent_seen", "_done", "_started", "_final",
                       "task_id", "agent")

    @staticmethod
    def action_listing(kwargs: dict[str, Any]) -> str | None:
        """Seats mode lists every legal move of the games in legal_moves.py; otherwise undeclared."""
        if kwargs.get("opponent") != "seats":
            return None
        return "all" if lists_moves(str(kwargs.get("game", ""))) else "none"

    def __init__(self, game: str = "TowerOfHanoi-v0", opponent: str = "random", agent_player: int = 0,
                 error_allowance: int | None = None):
        if game not in GAMES:
            import difflib

            close = difflib.get_close_matches(game, list(GAMES), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"TextArena game {game!r} is not one agentgym plays.{hint} See agentgym list TextArena")
        self.game, self.players = game, GAMES[game].players
        if opponent not in OPPONENTS:
            raise ConfigError(f"opponent must be one of {', '.join(OPPONENTS)}, got {opponent!r}")
        if opponent == "seats" and self.players < 2:
            raise ConfigError(f"opponent='seats' fills the players of a two-player game, and {game} has one player: "
                              "leave opponent out (a single-player game needs no seats)")
        self.seats_mode = opponent == "seats"
        # seats mode: every player is a seat an outside policy fills (agentgym/engine/multiagent.py)
        self.num_seats: int | None = self.players if self.seats_mode else None
        if agent_player not in range(self.players):
            raise ConfigError(f"agent_player must be in 0..{self.players - 1} for {game}, got {agent_player}")
        if error_allowance is not None and error_allowance < 0:
            raise ConfigError(f"error_allowance must be >= 0 (bad moves allowed per turn), got {error_allowance}")
        self.agent, self.error_allowance = agent_player, error_allowance
        self._ta: Any = None
        self._rng_state = random.Random(0).getstate()
        self._opponent_rng = random.Random(0)
        self._opponent_seen: list[str] = []
        self._done, self._started = True, False
        self._final: float | None = None
        self.task_id = ""

    @property
    def instructions(self) -> str:
        versus = " against an opponent" if self.players > 1 else ""
        return (f"You are playing {GAMES[self.game].title}, a TextArena game{versus}. The game sends you its rules "
                "and the current state. Each turn, reply with one move in the format the rules ask for, usually "
                "in square brackets, e.g. [up], [3 4 5] or [e2e4]. A move the game rejects is answered with the "
                "reason; a second bad move in a row may lose the game.")

    # ------------------------------------------------------------------ game calls
    @contextlib.contextmanager
    def _own_random(self) -> Iterator[None]:
        """Run game code with this env's `random` state (and its prints swallowed)."""
        with _RANDOM_LOCK:
            saved = random.getstate()
            random.setstate(self._rng_state)
            try:
                with contextlib.redirect_stdout(io.StringIO()):
                    yield
            finally:
                self._rng_state = random.getstate()
                random.setstate(saved)

    def _state(self) -> Any:
        return self._ta.state

    # ------------------------------------------------------------------ reset / step
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        options = dict(options or {})
        if "task_id" in options:
            game_seed = self._seed_from_task_id(str(options["task_id"]))
        else:
            game_seed = seed if seed is not None else int(self.np_random.integers(0, 2**31 - 1))
        textarena = require("textarena", "textarena")
        # a fresh game object per episode: some games keep state across their own resets (KuhnPoker
        # shuffles its deck in place), which would make a seed's game depend on the episodes before it
        self._ta = textarena.make(f"{self.game}-raw")
        # some games draw (deal cards, place pieces) before TextArena seeds `random`: seed it here first
        self._rng_state = random.Random(game_seed).getstate()
        with self._own_random():
            self._ta.reset(num_players=self.players, seed=game_seed)
        if self.error_allowance is not None:
            self._state().error_allowance = self.error_allowance
        self._opponent_rng = random.Random(game_seed + 1)
        self._opponent_seen, self._done, self._started, self._final = [], False, True, None
        self.task_id = f"textarena/{self.game}/{game_seed}"
        if self.seats_mode:
            self.agent = self._state().current_player_id
            obs = self._agent_messages() or "The game has started. Make your move."
            return self._finish(obs, self._seat_info(make_info(task_id=self.task_id)))
        self._play_opponent()
        obs = self._agent_messages() or "The game has started. Make your move."
        return self._finish(obs, make_info(task_id=self.task_id))

    def _seed_from_task_id(self, task_id: str) -> int:
        prefix = f"textarena/{self.game}/"
        tail = task_id[len(prefix):]
        if not task_id.startswith(prefix) or not tail.lstrip("-").isdigit():
            raise ConfigError(f"bad task_id {task_id!r} for this env; expected '{prefix}<seed>'")
        return int(tail)

    def step(self, action: str):
        if not self._started:
            raise RuntimeError("call reset() before step()")
        if self._done:
            return self._result("The game is over; reset the environment to play again.", valid=False)
        move = move_text(action)
        if not move:
            return self._result("Your reply had no move. Reply with one move in square brackets, e.g. [up].",
                                valid=False)
        error = self._game_step(move)
        if error is not None:
            return self._result(error, valid=False)
        valid = not self._agent_erred()
        if self.seats_mode:
            return self._seat_result(valid)
        self._play_opponent()
        return self._result(self._agent_messages() or "Move accepted.", valid=valid)

    # ------------------------------------------------------------------ seats mode
    def _seat_result(self, valid: bool):
        """The acting seat's move is in: the observation and info are the next seat's (its turn now); the step
        that ends the game pays every seat its outcome."""
        acting = self.agent
        rewards: dict[int, float] = {}
        if self._done:
            outcome = self._state().rewards or {}
            rewards = {seat: _outcome(outcome.get(seat, 0.0)) for seat in range(self.players)}
            self._final = rewards[acting]
            obs = self._agent_messages() or "The game is over."
            for seat in range(self.players):  # every seat's last messages (the result) are said once, here
                if seat != acting:
                    self.agent = seat
                    self._agent_messages()
            self.agent = acting
        else:
            self.agent = self._state().current_player_id
            obs = self._agent_messages() or "Your move."
        info = make_info(success=rewards.get(acting, 0.0) >= 1.0, valid_action=valid, task_id=self.task_id,
                         reward_components={"outcome": rewards[acting]} if rewards else {})
        info["seat_rewards"] = rewards
        info["seat_success"] = {seat: r >= 1.0 for seat, r in rewards.items()}
        obs, info = self._finish(obs, self._seat_info(info))
        return obs, rewards.get(acting, 0.0), self._done, False, info

    def _seat_info(self, info: dict[str, Any]) -> dict[str, Any]:
        """Whose turn it is (None once the game is over) and, where the game's moves can be listed, its moves."""
        info["seat"] = None if self._done else int(self.agent)
        if not self._done and lists_moves(self.game):
            info["admissible_actions"] = legal_moves(self.game, self._state().game_state)
        return info

    def _game_step(self, move: str) -> str | None:
        """One move into the game; a game that raises on odd input answers with the error instead."""
        try:
            with self._own_random():
                self._done = bool(self._ta.step(move)[0])
        except Exception as exc:  # TextArena games are not hardened against arbitrary text
            return (f"The game could not process that move ({type(exc).__name__}: {str(exc)[:200]}). "
                    "Reply with one move in the format the rules describe.")
        return None

    def _agent_erred(self) -> bool:
        state = self._state()
        if state.game_info.get(self.agent, {}).get("invalid_move"):
            return True
        return state.current_player_id == self.agent and getattr(state, "error_count", 0) > 0

    def _play_opponent(self) -> None:
        """Opponent moves until it is the agent's turn again (or the game ends); some games give a player
        several moves in a row (PigDice rolls). The opponent may retry up to OPPONENT_MOVES_PER_TURN
        rejected moves (random guesses are often illegal); then it plays one more bad move under the
        game's own allowance, which forfeits as the rules say. A game that never hands the turn back
        within OPPONENT_MOVE_LIMIT moves ends as a draw."""
        state = self._state()
        allowance = getattr(state, "error_allowance", None)
        tried: set[str] = set()
        rejected = 0
        for _ in range(OPPONENT_MOVE_LIMIT):
            if self._done or state.current_player_id == self.agent:
                break
            pid, messages = self._ta.get_observation()
            # the game's messages only: copying the agent's echoed move would be a forfeit, not a policy
            self._opponent_seen.extend(str(m[1]) for m in messages if m[0] == -1)
            if allowance is not None:
                state.error_allowance = allowance if rejected >= OPPONENT_MOVES_PER_TURN else 10**6
            errors_before = getattr(state, "error_count", 0)
            if self._game_step(self._opponent_move(tried)) is not None:
                self._done = True  # the game broke on its own opponent's move: end it as a draw
                break
            if getattr(state, "error_count", 0) > errors_before:
                rejected += 1
            else:
                rejected, tried = 0, set()
        else:
            self._done = True  # the opponent never handed the turn back: end the game as a draw
        if allowance is not None:
            state.error_allowance = allowance

    def _opponent_move(self, tried: set[str]) -> str:
        for _ in range(5):  # prefer a move not yet rejected this turn
            move = random_bracketed_move(self._opponent_seen, self._opponent_rng)
            if move not in tried:
                break
        tried.add(move)
        return move

    def _agent_messages(self) -> str:
        state = self._state()
        messages = state.observations.get(self.agent, [])
        state.observations[self.agent] = []
        lines = []
        for sender, text, kind in messages:
            opponent = sender not in (-1, self.agent)
            if getattr(kind, "name", "") == "PLAYER_ACTION" and not opponent:
                continue  # the agent's own move, echoed back
            lines.append(f"[Player {sender} (opponent)] {text}" if opponent else text)
        return "\n\n".join(str(line).strip() for line in lines if str(line).strip())

    def _result(self, obs: str, valid: bool):
        components: dict[str, float] = {}
        if self._done and self._final is None:  # the game's outcome, paid on the turn it ends
            self._final = _outcome((self._state().rewards or {}).get(self.agent, 0.0))
            components["outcome"] = self._final
        success = self._final is not None and self._final >= 1.0
        info = make_info(success=success, valid_action=valid, reward_components=components, task_id=self.task_id)
        if self.seats_mode:  # a move the game could not take: the same seat moves again
            info = {**self._seat_info(info), "seat_rewards": {}, "seat_success": {}}
        obs, info = self._finish(obs, info)
        return obs, float(sum(components.values())), self._done, False, info

    def _finish(self, obs: str, info: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        obs = obs.encode("utf-8", "replace").decode("utf-8")  # the game may echo lone surrogates back
        state = self._state()
        board = _ADDRESS.sub("", repr(getattr(state, "game_state", None)))
        info["anchor"] = hashlib.sha1(f"{state.current_player_id}|{board}".encode("utf-8", "replace")).hexdigest()
        self._last_obs = obs
        return obs, self.finish_info(obs, info)

    def close(self) -> None:
        if self._ta is not None:
            with contextlib.suppress(Exception):
                self._ta.close()
        self._ta, self._started, self._done = None, False, True


def _outcome(reward: Any) -> float:
    """The game's reward as a float; a few games (Countdown, Cryptarithm, Slitherlink in textarena 0.7) pass
    their reason where the reward goes when a second bad move ends the game, which is a forfeit: -1."""
    try:
        return float(reward)
    except (TypeError, ValueError):
        return -1.0


def random_bracketed_move(messages: list[str], rng: random.Random) -> str:
    """A random bracketed move from the latest message that shows some (most games list or exemplify their
    moves in brackets), else a random digit in brackets."""
    for text in reversed(messages):  # newest first; the rules' examples may be many messages back
        moves = [m for m in _BRACKETED.findall(text) if not m.startswith(("Player", "GAME"))]
        if moves:
            return f"[{rng.choice(moves)}]"
    return f"[{rng.randint(0, 9)}]"


_TOOL_CALL = re.compile(r"<tool_call>.*?(?:</tool_call>|$)", re.S)


def move_text(action: Any) -> str:
    """The move in a reply: an <action> tag or the whole reply (without tool calls: these envs have no
    tools), bracketed when it is a short bare move."""
    text = action if isinstance(action, str) else str(action)
    text = _TOOL_CALL.sub("", text[-20_000:])
    tagged = extract_tag(text, "action")
    text = (tagged if tagged is not None else text)[-MAX_MOVE_CHARS:]
    text = text.encode("utf-8", "ignore").decode("utf-8").strip()
    text = "".join(ch for ch in text if ch.isprintable() or ch == "\n")
    if not text or text.strip("[] \n") == "":
        return ""
    # a short ASCII bare move is bracketed as TextArena's ActionFormattingWrapper does; prose is not, since
    # lenient parsers (2048 reads any word "a"/"w"/"s"/"d" inside brackets) would find a move in it
    # ... and a bare reply without a letter ("3", "0:") is not taken for a move: the rules ask for [3]
    short = len(text) <= MAX_BARE_MOVE_CHARS and "\n" not in text and text.isascii() and re.search("[A-Za-z]", text)
    return f"[{text}]" if "[" not in text and short else text
