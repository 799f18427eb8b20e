"""Self-play training on TicTacToe with the tiny model: a frozen opponent never trains, resume keeps the league,
and the config refuses what self-play cannot run with."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agentgym.errors import ConfigError
from agentgym.train.config import load_config
from agentgym.train.trainer import Trainer, train

pytest.importorskip("textarena")


def config(run_dir: Path, *extra: str):
    return load_config("selfplay_tictactoe_cpu", [
        "model.policy=tiny:keydoor", "model.lora.enabled=false", "rollout.groups=1", "rollout.group_size=2",
        "selfplay.learner_seats=alternate", "selfplay.pool=[start]", "selfplay.eval_every=0", "optim.lr=0.01",
        f"train.run_dir={run_dir}", "logging.progress=false", *extra])


@pytest.mark.slow
def test_a_frozen_opponent_never_trains(tmp_path):
    trainer = Trainer(config(tmp_path, "train.iterations=1"))
    try:
        start = {k: v.clone() for k, v in trainer.collector.league.weights(trainer.collector.league.members[0]).items()}
        collected = trainer.collector.collect(0)
        trainer.collector.next_seed -= 1  # step() plays the same group again
        trainer.step()
        # only the learner's seat trains: one trajectory per match, in the learner's seat's group
        assert len(collected.batch) == 2 and {t.group_id % 2 for t in collected.batch} == {0}
        league = trainer.collector.league
        frozen = league.weights(league.members[0])
        assert all(torch.equal(frozen[k], start[k]) for k in start)  # the update left the frozen weights alone
        moved = dict(trainer.model.named_parameters())
        assert any(not torch.equal(moved[k].detach().cpu(), start[k]) for k in start)  # ... and moved the learner's
        saved = torch.load(league.members[0].path, weights_only=True)
        assert all(torch.equal(saved[k], start[k]) for k in start)
    finally:
        trainer.close()


@pytest.mark.slow
def test_resume_keeps_the_league(tmp_path):
    train(config(tmp_path, "train.iterations=2", "selfplay.snapshot_every=1", "checkpoint.every=1"))
    resumed = Trainer(config(tmp_path, "train.iterations=3", "selfplay.snapshot_every=1", "checkpoint.resume=auto"))
    try:
        league = resumed.collector.league
        assert [m.name for m in league.members] == ["start", "snapshot-1", "snapshot-2"]
        assert resumed.iteration == 2 and resumed.collector.next_seed == 2
        snapshot = torch.load(tmp_path / "league" / "snapshot-2.pt", weights_only=True)
        now = dict(resumed.model.named_parameters())  # the resumed weights are the ones the last snapshot froze
        assert all(torch.equal(now[k].detach().cpu(), v) for k, v in snapshot.items())
        resumed.run()
        assert [m.name for m in resumed.collector.league.members][-1] == "snapshot-3"
    finally:
        resumed.close()


def test_self_play_refuses_an_env_without_seats_and_unsupported_options(tmp_path):
    with pytest.raises(ConfigError, match="does not say whose turn it is"):
        config(tmp_path, "rollout.env_kwargs={}")
    with pytest.raises(ConfigError, match="selfplay.eval_every"):
        config(tmp_path, "eval.every=1")
    with pytest.raises(ConfigError, match="selfplay.learner_seats must be one of"):
        config(tmp_path, "selfplay.learner_seats=some")


@pytest.mark.slow
def test_a_pool_spec_that_fails_to_load_is_refused_before_any_match(tmp_path):
    with pytest.raises(ConfigError, match=r"seat selfplay.pool entry 'checkpoint:.*' .*failed to load"):
        Trainer(config(tmp_path, f"selfplay.pool=[start, 'checkpoint:{tmp_path}/none']"))
    assert not (tmp_path / "metrics.jsonl").exists()


def test_the_sampling_rule_and_the_snapshot_cap(tmp_path):
    from collections import Counter

    from agentgym.train.selfplay.league import League

    weights = {"w": torch.zeros(2)}
    league = League.fresh(tmp_path, ("random", "start"), lambda: weights, sampling="latest", latest_share=0.75,
                          max_snapshots=2, seed=3)
    assert {league.sample().name for _ in range(50)} == {"random", "start"}  # uniform until a snapshot exists
    for it in (2, 4, 6):
        league.add_snapshot(it, {"w": torch.full((2,), float(it))})
    assert [m.name for m in league.members] == ["random", "start", "snapshot-4", "snapshot-6"]  # the oldest left
    drawn = Counter(league.sample().name for _ in range(4000))
    assert abs(drawn["snapshot-6"] / 4000 - 0.75) < 0.03  # the newest with latest_share ...
    for other in ("random", "start", "snapshot-4"):  # ... the rest uniformly
        assert abs(drawn[other] / 4000 - 0.25 / 3) < 0.03
    assert torch.equal(league.weights(league.members[-1])["w"], torch.full((2,), 6.0))
    uniform = League.fresh(tmp_path / "u", ("random", "start"), lambda: weights, sampling="uniform", seed=3)
    uniform.add_snapshot(1, weights)
    assert all(abs(n / 3000 - 1 / 3) < 0.04 for n in Counter(uniform.sample().name for _ in range(3000)).values())


@pytest.mark.slow
def test_the_connectfour_preset_trains_one_tiny_iteration(tmp_path):
    from agentgym.train.metrics import read_metrics

    cfg = load_config("selfplay_connectfour_cpu", [
        "model.policy=tiny:keydoor", "model.lora.enabled=false", "rollout.groups=1", "rollout.group_size=2",
        "train.iterations=1", f"train.run_dir={tmp_path}", "logging.progress=false"])
    assert cfg.train.token_budget == 2048   # the preset's packed rows (its memory)
    train(cfg)
    [row] = read_metrics(tmp_path)
    assert row["update/tokens"] > 0 and row["update/packed_token_share"] <= 1.0
    assert any(k.startswith("selfplay/vs_") for k in row)
