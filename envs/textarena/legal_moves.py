"""The legal moves of the games whose board says them all, read off TextArena's `state.game_state`: what seats
mode lists as `admissible_actions` (`rollout.action_mode=admissible` chooses among them). A game is listed here
only when its list is complete and each entry is accepted as written."""
from __future__ import annotations

from typing import Any, Callable


def _tictactoe(state: dict[str, Any]) -> list[str]:
    board = state["board"]
    return [f"[{r * 3 + c}]" for r in range(3) for c in range(3) if board[r][c] == ""]


def _connect_four(state: dict[str, Any]) -> list[str]:
    top = state["board"][0]  # a column takes a disc while its top cell is empty
    return [f"[{c}]" for c, cell in enumerate(top) if cell == "."]


MOVES: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "TicTacToe-v0": _tictactoe,
    "ConnectFour-v0": _connect_four,
    "ConnectFour-v0-large": _connect_four,
}


def lists_moves(game: str) -> bool:
    return game in MOVES


def legal_moves(game: str, game_state: dict[str, Any]) -> list[str]:
    """Every legal move of `game` in `game_state` (TextArena's dict), as the game accepts it."""
    return MOVES[game](game_state)
