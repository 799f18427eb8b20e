"""The gateway's training side: an outside harness (openai client only) played G times per task through the
gateway in front of the tiny model -> the trainer's batch, token-identical to what the engine generated."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from agentgym.errors import ConfigError
from agentgym.train.gateway.collector import GatewayCollector, command_harness
from agentgym.train.samples import build_samples

pytest.importorskip("openai")
HARNESS = Path(__file__).resolve().parent / "harness_keydoor.py"


def test_groups_of_harness_runs_become_the_trainers_batch_token_identical(tiny_policy, serve):
    from harness_keydoor import play

    policy, chat = tiny_policy
    gateway, url = serve(policy, chat, max_new_tokens=1, max_sessions=8)
    seen: dict[str, dict] = {}

    def harness(run):
        seen[run.api_key] = play(run.base_url, run.api_key, run.task)
        return None   # the harness closed its session with the reward itself

    collector = GatewayCollector(gateway, url, harness, lambda seed: {"seed": seed, "max_turns": 3}, groups=2,
                                 group_size=3, workers=4)
    batch, first, stats = collector.collect(iteration=5)
    assert len(first) == 6 and [t.group_id for t in first] == [0, 0, 0, 1, 1, 1]
    assert stats["failed_dropped"] == 0 and stats["groups_not_one_task"] == 0 and len(batch) == 6
    assert stats["gateway/calls"] == sum(len(out["calls"]) for out in seen.values())
    assert stats["gateway/segments_per_session"] == 1.0 and stats["gateway/retokenized_share"] == 0.0
    assert collector.next_seed == 2 and gateway.version == 5 and gateway.store.counts() == {"open": 0, "closed": 0}
    outputs = sorted(seen.values(), key=lambda out: [c["token_ids"] for c in out["calls"]])
    trajs = sorted(first, key=lambda t: [list(turn.response_ids) for turn in t.turns])
    for traj, out in zip(trajs, outputs):   # what the harness was sent is what the trainer trains on
        assert [list(turn.response_ids) for turn in traj.turns] == [c["token_ids"] for c in out["calls"]]
        assert traj.total_reward == out["reward"] and traj.success == out["success"]
        assert all(turn.policy_version == 5 for turn in traj.turns)
    for sample, traj in zip(build_samples(batch, "trajectory"), batch):
        last = traj.turns[-1]
        assert list(sample.ids) == list(last.prompt_ids + last.response_ids)
        assert int(sample.mask.sum()) == sum(len(turn.response_ids) for turn in traj.turns)


def test_a_failing_harness_is_dropped_with_its_group_left_too_small(tiny_policy, serve):
    from harness_keydoor import play

    policy, chat = tiny_policy
    gateway, url = serve(policy, chat, max_new_tokens=1)

    def harness(run):
        if run.seed == 1 and run.sample == 0:
            raise RuntimeError("the agent crashed")
        if run.seed == 1 and run.sample == 1:   # this one leaves without any reward
            return play(run.base_url, run.api_key, run.task, report=False) and None
        return play(run.base_url, run.api_key, run.task, report=False)["reward"]   # the reward as a return value

    collector = GatewayCollector(gateway, url, harness, lambda seed: {"seed": seed, "max_turns": 2}, groups=2,
                                 group_size=3, workers=3)
    batch, first, stats = collector.collect(0)
    errors = sorted(t.error for t in first if t.error)
    assert errors == ["RuntimeError: the agent crashed", "the session ended without a reward"]
    # group 1 keeps one run of three: too few to compare, so it goes too
    assert stats["failed_dropped"] == 2 and stats["groups_dropped_after_failures"] == 1
    assert {t.group_id for t in batch} == {0} and len(batch) == 3
    # a reward function scores sessions that end without one
    scored = GatewayCollector(gateway, url, lambda run: play(run.base_url, run.api_key, run.task, report=False) and None,
                              lambda seed: {"seed": seed, "max_turns": 1}, groups=1, group_size=2, workers=2,
                              reward_fn=lambda session: float(len(session.calls)))
    batch, _, stats = scored.collect(1)
    assert [t.total_reward for t in batch] == [1.0, 1.0] and stats["failed_dropped"] == 0


@pytest.mark.slow   # ~9 s: two harness processes import the openai client
def test_the_harness_as_a_program(tiny_policy, serve):
    policy, chat = tiny_policy
    gateway, url = serve(policy, chat, max_new_tokens=1)
    collector = GatewayCollector(gateway, url, command_harness([sys.executable, str(HARNESS)], timeout_s=120),
                                 lambda seed: {"seed": seed, "max_turns": 2}, groups=1, group_size=2, workers=2)
    batch, first, stats = collector.collect(0)
    assert stats["failed_dropped"] == 0 and len(batch) == 2
    assert all(1 <= len(t.turns) <= 2 and t.error is None for t in batch)
    broken = GatewayCollector(gateway, url, command_harness([sys.executable, "-c", "import sys; sys.exit('no agent')"]),
                              lambda seed: {}, groups=1, group_size=2, workers=2)
    _, first, stats = broken.collect(1)
    assert stats["failed_dropped"] == 2 and "no agent" in first[0].error


def test_bad_collector_settings_are_refused(tiny_policy, serve):
    policy, chat = tiny_policy
    gateway, url = serve(policy, chat, max_sessions=4)
    with pytest.raises(ConfigError, match="max_sessions"):
        GatewayCollector(gateway, url, lambda run: 0.0, lambda seed: {}, groups=1, group_size=2, workers=8)
    with pytest.raises(ConfigError, match="empty"):
        command_harness("")
