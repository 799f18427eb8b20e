"""The gateway's merge rule (calls -> token-exact segments) and a session -> the trainer's trajectory and samples."""
from __future__ import annotations

import numpy as np
import pytest

from agentgym.trajectory import TurnTable
from agentgym.train.gateway.merge import segments, session_trajectory
from agentgym.train.gateway.sessions import Call, Session
from agentgym.train.samples import build_samples


def call(index: int, prompt: list[int], completion: list[int]) -> Call:
    return Call(index, tuple(prompt), tuple(completion), tuple(-0.1 * (k + 1) for k in range(len(completion))),
                f"text {index}", "stop")


def test_appending_calls_merge_into_one_segment():
    c0 = call(0, [1, 2, 3], [10, 11])
    c1 = call(1, [1, 2, 3, 10, 11, 4, 5], [12])         # prompt = previous prompt + completion + new turn
    c2 = call(2, [1, 2, 3, 10, 11, 4, 5, 12, 6], [13, 14])
    assert segments([c0, c1, c2]) == [[0, 1, 2]]


def test_a_history_rewrite_starts_a_new_segment():
    c0 = call(0, [1, 2, 3], [10, 11])
    c1 = call(1, [1, 2, 3, 10, 11, 4], [12])
    summarised = call(2, [1, 2, 9, 4], [13])              # a summarising harness dropped turns: no prefix
    edited = call(3, [1, 2, 3, 10, 99, 4], [15])          # an edited answer: the completion is not a prefix
    assert segments([c0, c1, summarised, edited]) == [[0, 1], [2], [3]]
    # the prompt alone (the completion dropped, e.g. a retry of the same call) is no extension either
    assert segments([c0, call(1, [1, 2, 3], [16])]) == [[0], [1]]


def test_interleaved_sub_agent_continues_its_own_segment_and_the_longest_prefix_wins():
    parent0 = call(0, [1, 2], [10])
    sub0 = call(1, [7, 8], [20])                          # a sub-agent with its own conversation
    parent1 = call(2, [1, 2, 10, 3], [11])
    sub1 = call(3, [7, 8, 20, 4], [21])
    assert segments([parent0, sub0, parent1, sub1]) == [[0, 2], [1, 3]]
    # two segments whose sequences both prefix a prompt: the longer (more specific) one takes it
    b = call(0, [1, 2, 5], [6])                           # sequence [1, 2, 5, 6]
    a = call(1, [1], [2])                                 # [1, 2]: not an extension of b's, a new segment
    both = call(2, [1, 2, 5, 6, 7], [8])                  # extends [1, 2] and [1, 2, 5, 6]
    assert segments([b, a, both]) == [[0, 2], [1]]


def session_of(calls: list[Call], reward: float | None = 1.0, **kw) -> Session:
    return Session("gw-test", task="t", group=3, sample=1, status="closed", calls=list(calls), reward=reward, **kw)


def test_session_trajectory_marks_segments_and_places_rewards():
    c0 = call(0, [1, 2, 3], [10, 11])
    c1 = call(1, [1, 2, 3, 10, 11, 4], [12])
    c2 = call(2, [1, 9], [13])                            # rewritten history: segment 2
    c3 = call(3, [1, 2, 3, 10, 11, 4, 12, 5], [14])       # back on segment 1 after it
    s = session_of([c0, c1, c2, c3], reward=1.0, call_rewards={1: 0.25})
    t = session_trajectory(s, group_id=3, sample_index=1)
    assert [turn.info["call"] for turn in t.turns] == [0, 1, 3, 2]     # grouped by segment
    assert ["fold_message" in turn.info for turn in t.turns] == [False, False, False, True]
    assert [turn.reward for turn in t.turns] == [0.0, 0.25, 0.0, 1.0]  # the session's reward on the last turn
    assert t.total_reward == 1.25 and t.success and t.outcome == "success" and t.group_id == 3
    assert t.turns[-1].terminated and not t.turns[0].terminated
    # the trainer's fold layout: one sample per segment, holding every call's ids and sampler log-probs exactly
    samples = build_samples([t], "fold")
    assert [list(s.ids) for s in samples] == [[1, 2, 3, 10, 11, 4, 12, 5, 14], [1, 9, 13]]
    first = samples[0]
    for turn in t.turns[:3]:
        start = len(turn.prompt_ids)
        assert list(first.ids[start:start + len(turn.response_ids)]) == list(turn.response_ids)
        assert np.allclose(first.rollout_logprobs[start:start + len(turn.response_ids)], turn.logprobs)
        assert set(first.row[start:start + len(turn.response_ids)]) == {turn.index}
    assert int(first.mask.sum()) == 2 + 1 + 1            # only completion tokens are trained
    assert len(TurnTable.from_trajectories([t])) == 4


def test_a_one_segment_session_is_a_trajectory_layout_sample():
    c0 = call(0, [1, 2], [10])
    c1 = call(1, [1, 2, 10, 3], [11])
    t = session_trajectory(session_of([c0, c1]), 0, 0)
    (sample,) = build_samples([t], "trajectory")
    assert list(sample.ids) == [1, 2, 10, 3, 11] and list(sample.row) == [-1, -1, 0, -1, 1]


@pytest.mark.parametrize("reward,error,expect", [(None, None, "the session ended without a reward"),
                                                 (0.0, "RuntimeError: harness crashed", "RuntimeError: harness crashed")])
def test_failed_sessions_are_errors_the_trainer_drops(reward, error, expect):
    t = session_trajectory(session_of([call(0, [1], [2])], reward=reward, error=error), 0, 0)
    assert t.outcome == "error" and t.error == expect and t.end_reason == "failed" and not t.success


def test_success_comes_from_the_harness_flag_or_the_reward_threshold():
    assert not session_trajectory(session_of([call(0, [1], [2])], reward=0.5), 0, 0).success
    assert session_trajectory(session_of([call(0, [1], [2])], reward=0.5, success=True), 0, 0).success
    assert session_trajectory(session_of([call(0, [1], [2])], reward=0.5), 0, 0, success_at=0.5).success
