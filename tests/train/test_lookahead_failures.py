"""The lookahead collector drops what an infrastructure failure ended, as every collector does (issue 51,
collectors/base.py `drop_failed`): a failed greedy play leaves the batch, a failed play-out leaves its decision
(it would enter the decision's advantages as a return of 0), and a decision with no alternative left is dropped."""
from __future__ import annotations

from pathlib import Path

import pytest

from agentgym.engine.lookahead import Decision
from agentgym.policy import Choice
from agentgym.train.collectors.lookahead import drop_failed_plays
from agentgym.trajectory import Trajectory, Turn

CANDS = ((1,), (2,), (3,))


def _play(group: int, rewards, end: str = "max_turns", error: str | None = None) -> Trajectory:
    turns = tuple(Turn(index=i, observation=f"o{i}", action=f"a{i}", prompt_ids=(1, 2), response_ids=(1,),
                       logprobs=(0.0,), reward=r, choice=Choice(CANDS, 0, scores=(0.0, -1.0, -2.0)))
                  for i, r in enumerate(rewards))
    return Trajectory(env_id="e", seed=group, group_id=group, sample_index=0, turns=turns, success=False,
                      end_reason=end, error=error)


def test_failed_trunks_and_play_outs_are_dropped_by_hand():
    ok0, ok1, broken = _play(0, [0, 0]), _play(1, [0, 0]), _play(2, [0], end="failed", error="ConnectionError")
    crash = _play(9, [0], end="failed", error="ConnectionError: env server went away")
    good = _play(9, [0, 1])
    both = Decision(ok0, 1, (0, 1, 2), (ok0, crash, good))     # one of two play-outs failed: the other stays
    none_left = Decision(ok1, 0, (0, 1), (ok1, crash))         # its only play-out failed: nothing to compare
    trunks, decisions, counts = drop_failed_plays([ok0, ok1, broken], [both, none_left])
    assert trunks == [ok0, ok1]
    assert len(decisions) == 1 and decisions[0].picks == (0, 2) and decisions[0].plays == (ok0, good)
    assert counts == {"failed_dropped": 3.0, "groups_dropped_after_failures": 1.0}


def _register_crashing_env(scratch_ids, trunk_seed: int, playouts: int) -> tuple[str, dict[str, int]]:
    """The one-word key-door (snapshots and all) whose first play of `trunk_seed` and first `playouts` restored
    play-outs raise in step, as an env server that dies under them would. Returns the id and the crash count."""
    import agentgym
    from agentgym.envs.toy.oneword import OneWordKeyDoor

    seen = {"resets": 0, "restores": 0, "crashes": 0}

    class Crashing(OneWordKeyDoor):
        def reset(self, *, seed=None, options=None):
            if seed == trunk_seed:
                seen["resets"] += 1
            self.crashes = seed == trunk_seed and seen["resets"] == 1
            return super().reset(seed=seed, options=options)

        def restore(self, data):
            super().restore(data)
            seen["restores"] += 1
            self.crashes = seen["restores"] <= playouts

        def step(self, action):
            if self.crashes:
                seen["crashes"] += 1
                raise ConnectionError("env server on 127.0.0.1 went away")
            return super().step(action)

    env_id = f"test/LookaheadCrashing{trunk_seed}x{playouts}-v0"
    agentgym.register(env_id, entry_point=Crashing, max_turns=8)
    scratch_ids.append(env_id)
    return env_id, seen


@pytest.mark.slow
def test_the_collector_trains_on_no_failed_episode(tmp_path: Path, scratch_ids):
    """A real lookahead iteration on the tiny model: seed 0's greedy play and the first two play-outs crash."""
    pytest.importorskip("transformers")
    from agentgym.train.config import load_config
    from agentgym.train.metrics import read_metrics
    from agentgym.train.trainer import Trainer

    env_id, seen = _register_crashing_env(scratch_ids, trunk_seed=0, playouts=2)
    cfg = load_config("toy_learning", [f"train.run_dir={tmp_path}", "rollout.action_mode=admissible",
                                       "rollout.max_new_tokens=3", "train.iterations=1", "rollout.groups=4",
                                       "rollout.group_size=1", "rollout.lookahead=2", "rollout.lookahead_points=2",
                                       "eval.every=0", "logging.progress=false", "model.train_layers=1",
                                       f"rollout.env={env_id}", "rollout.executor=serial"])
    trainer = Trainer(cfg)
    got = []
    play = trainer.collector.collect
    trainer.collector.collect = lambda iteration: got.append(play(iteration)) or got[-1]  # keep what it handed over
    try:
        trainer.run()  # one iteration, trained on what is left
        [collected] = got
        assert seen["crashes"] == 3, seen  # the trunk and two play-outs failed
        assert [t.outcome for t in collected.first].count("error") == 1  # logged, as the played round
        assert all(t.outcome != "error" for t in collected.batch)
        assert all(p.outcome != "error" for d in collected.decisions for p in d.plays)
        assert all(len(d.plays) == len(d.picks) >= 2 for d in collected.decisions)
        assert collected.stats["failed_dropped"] == 3.0
        assert len(collected.batch) == 3 + sum(len(d.plays) - 1 for d in collected.decisions)
    finally:
        trainer.close()
    [m] = read_metrics(tmp_path)
    assert m["failed_dropped"] == 3.0 and m["infra/failed_episodes"] == 1.0 and m["lookahead/decisions"] >= 1
