"""An async resume loses no group that was in flight at the checkpoint (issue 51): the rollout side's state keeps
the seeds claimed but not finished, and a resumed AsyncRollouts plays them again before any new seed."""
from __future__ import annotations

import threading

from agentgym.train.async_rl import AsyncRollouts, VersionedPolicy, WeightBox
from agentgym.trajectory import Trajectory, Turn


class _Policy:
    def update_weights(self, state):
        pass


def _group(seed: int, version: int) -> list[Trajectory]:
    turn = Turn(index=0, observation="", action="", prompt_ids=(1,), response_ids=(2,), logprobs=(-0.1,), reward=0.0,
                policy_version=version)
    return [Trajectory(env_id="e", seed=seed, group_id=seed, sample_index=k, turns=(turn,), success=False,
                       end_reason="max_turns") for k in range(2)]


def _side(play, **state) -> AsyncRollouts:
    """One worker, chunks of one group, two groups a batch, η = 1: the claim order is the seed order."""
    return AsyncRollouts(VersionedPolicy(_Policy(), WeightBox(state.get("iteration", 0))), play, groups=2, chunk=1,
                         workers=1, max_staleness=1, group_size=2, **{"next_seed": 0, "iteration": 0, **state})


def _train(side: AsyncRollouts, start: int, stop: int) -> list[int]:
    """The seeds the trainer takes in iterations start..stop-1."""
    seeds = []
    for it in range(start, stop):
        groups, _ = side.take(it, drop_stale=False)
        seeds += [g[0].seed for g in groups]
        side.advance(it + 1)
    return seeds


def test_a_resume_plays_the_groups_in_flight_at_the_checkpoint_first():
    def play(seeds, policy, version):
        return [t for s in seeds for t in _group(s, version)]

    unkilled = _side(play)
    try:
        reference = _train(unkilled, 0, 4)
    finally:
        unkilled.stop()
    assert reference == list(range(8))

    # the killed run: seed 3 is still playing when the checkpoint after iteration 0 is written
    playing, killed = threading.Event(), threading.Event()

    def hangs_on_3(seeds, policy, version):
        if 3 in seeds:
            playing.set()
            killed.wait(timeout=30)
            raise RuntimeError("the trainer is stopping")
        return play(seeds, policy, version)

    first = _side(hangs_on_3)
    try:
        trained = _train(first, 0, 1)
        assert playing.wait(timeout=30)
        queued, next_seed, in_flight = first.pending()
    finally:
        killed.set()
        first.stop()
    assert trained == [0, 1] and [g[0].seed for g in queued] == [2] and next_seed == 4 and in_flight == [3]

    resumed = _side(play, next_seed=next_seed, iteration=1, pending=queued, in_flight=in_flight)
    try:
        trained += _train(resumed, 1, 4)
        assert resumed.pending()[2] == []  # handed out and finished: nothing in flight is left over
    finally:
        resumed.stop()
    assert sorted(trained) == reference  # none lost, none twice (before the fix: 0, 1, 2, 4, 5, 6, 7, 8)


def test_restored_in_flight_seeds_hold_their_gate_slots_and_are_kept_until_handed_out():
    """A resume checkpointed again before its workers start keeps the restored seeds; they are handed out in
    consecutive chunks (a chunk's group ids are its first seed + k) even where the gate is shut."""
    def play(seeds, policy, version):
        return [t for s in seeds for t in _group(s, version)]

    side = AsyncRollouts(VersionedPolicy(_Policy(), WeightBox(1)), play, groups=2, chunk=2, workers=1,
                         max_staleness=0, next_seed=9, iteration=1, in_flight=[7, 4, 5])
    assert side.pending() == ([], 9, [4, 5, 7]) and side._allowance() < 0  # the gate is shut
    assert side._claim() == ([4, 5], 1) and side._claim() == ([7], 1)  # past the gate: their slots were counted
    assert side.pending()[2] == [4, 5, 7]  # claimed, still unfinished
    side.stop()
