"""The quick start's "where training time went" lines (train/time_summary.py) from metrics.jsonl records."""
from __future__ import annotations

import json

from agentgym.train.time_summary import time_lines


def _write(path, records):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + "not json\n")


def test_sft_and_rl_lines_say_where_the_time_went(tmp_path):
    _write(tmp_path / "sft" / "metrics.jsonl", [
        {"phase": "data", "samples": 4, "tokens": 3200, "time/data": 2.0},
        {"phase": "trunk", "time/trunk": 30.0, "trunk_layers": 22},
        {"phase": "train", "iteration": 0, "time/train": 10.0, "tokens_per_s/train": 100.0},
        {"phase": "train", "iteration": 1, "time/train": 30.0, "tokens_per_s/train": 50.0},
    ])
    _write(tmp_path / "metrics.jsonl", [
        {"iteration": 0, "time/rollout": 40.0, "time/train": 60.0, "time/update_trunk": 20.0,
         "time/update_forward": 15.0, "time/update_backward": 24.0, "time/update_optimizer": 1.0,
         "tokens_per_s/update": 300.0, "gflops_per_s/update": 150.0, "update/tokens_per_sequence": 1800.0},
        {"iteration": 1, "success": 0.5},  # no timing: left out
    ])
    sft, rl = time_lines(tmp_path)
    assert "demos 2 s (4 demos, 800 conversation tokens each)" in sft
    assert "frozen trunk once 30 s (22 layers)" in sft
    assert "2 steps 40 s (20.0 s a step, 62 conversation tokens/s)" in sft  # (1000 + 1500) / 40
    assert rl.startswith("RL iteration 0: rollout 40 s, update 60 s (trunk 20, forward 15, backward 24, optimizer 1)")
    assert "300 update tokens/s, 150 GFLOP/s, 1800 tokens an episode" in rl


def test_missing_files_give_no_lines(tmp_path):
    assert time_lines(tmp_path) == []
