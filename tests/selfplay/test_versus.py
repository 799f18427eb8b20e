"""`agentgym eval --opponent SPEC`: two policies on real TextArena games, both seat orders; bad specs refused."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("textarena")
pytestmark = pytest.mark.slow  # each runs the CLI in a subprocess (~5 s)


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentgym", "eval", *args], capture_output=True, text=True,
                          timeout=300)


def test_two_policies_play_both_seat_orders(tmp_path):
    done = run("--policy", "random:1", "--opponent", "random:2", "--env", "agentgym/TextArena-TicTacToe-v0",
               "--episodes", "3", "--max-observation-tokens", "300", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "versus.json").read_text())["envs"]["agentgym/TextArena-TicTacToe-v0"]
    assert record["as_seat_0"]["games"] == 3 and record["as_seat_1"]["games"] == 3 and record["total"]["games"] == 6
    total = record["total"]
    assert total["win"] + total["draw"] + total["loss"] == 6
    assert total["win"] == record["as_seat_0"]["win"] + record["as_seat_1"]["win"]
    low, high = total["win_ci"]
    assert low <= total["win_rate"] <= high
    assert "random:1 vs random:2" in done.stdout


def test_an_opponent_that_fails_to_load_is_refused_before_any_match(tmp_path):
    done = run("--policy", "random", "--opponent", f"checkpoint:{tmp_path}/none", "--env",
               "agentgym/TextArena-TicTacToe-v0", "--out", str(tmp_path / "out"))
    assert done.returncode != 0
    assert "opponent (--opponent): the policy spec" in done.stderr and "failed to load" in done.stderr
    assert not (tmp_path / "out" / "versus.json").exists()


def test_options_that_write_trajectories_are_refused(tmp_path):
    done = run("--policy", "random", "--opponent", "random", "--env", "agentgym/TextArena-TicTacToe-v0",
               "--keep-prompt-ids", "--out", str(tmp_path))
    assert done.returncode != 0 and "drop --keep-prompt-ids" in done.stderr


def test_a_one_player_env_is_refused(tmp_path):
    done = run("--policy", "random", "--opponent", "random", "--env", "agentgym/Toy-KeyDoor-v0",
               "--out", str(tmp_path))
    assert done.returncode != 0 and "does not say whose turn it is" in done.stderr
