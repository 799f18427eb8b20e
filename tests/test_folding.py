"""The fold layout: older turns are folded into a summary once the context passes a budget, the model's summary
is a turn of its own, and token-in-token-out holds in every segment (checked against the chat template)."""
from __future__ import annotations

import pytest
from test_chat import llama3_tokenizer, qwen_tokenizer, smol_tokenizer, smol_tokenizer_dir, tokenizer  # noqa: F401

import agentgym
from agentgym import TextEnv, make_info
from agentgym.chat import TRUNCATION_MARKER, ChatFormat
from agentgym.errors import ConfigError
from agentgym.engine.layouts import FOLD_REQUEST, fold_messages, fold_segments, is_summary
from agentgym.policies.scripted import ScriptedPolicy
from agentgym.policy import SamplingParams
from agentgym.registration import make
from agentgym.engine.rollout import RolloutConfig, rollout
from agentgym.oracle_check import env_steps
from agentgym.trajectory import TurnTable

CHAT = ChatFormat.simple()
LONG_KEYDOOR = {"length": 14}  # ~17 oracle turns of ~60-90 tokens: passes a 1,000-token context


def oracle_or_summary(context):
    if context.observation.endswith(FOLD_REQUEST):
        return f"Summary: {context.observation.splitlines()[0][:40]} I walk on towards the key and the door."
    return context.env.oracle_action()


def run(layout="fold", context=1000, policy=oracle_or_summary, **kwargs):
    config = RolloutConfig(layout=layout, max_context_tokens=context, max_turns=40, executor="serial",
                           sampling=SamplingParams(max_tokens=64), **kwargs)
    return rollout("agentgym/Toy-KeyDoor-Long-v0", ScriptedPolicy(policy, CHAT), CHAT, seeds=[3, 4], config=config,
                   env_kwargs=LONG_KEYDOOR)


def test_fold_finishes_what_the_trajectory_layout_cannot_fit():
    assert {t.end_reason for t in run("trajectory")} == {"context_full"}
    for traj in run():
        assert traj.success and traj.end_reason == "terminated"
        summaries = [t for t in traj.turns if is_summary(t)]
        assert len(summaries) >= 1
        assert max(len(t.prompt_ids) + len(t.response_ids) for t in traj.turns) <= 1000


def test_tito_holds_across_every_fold():
    for traj in run():
        for k, turn in enumerate(traj.turns):  # every prompt is the template's tokenisation of its conversation
            CHAT.verify(turn.prompt_ids, fold_messages(CHAT, traj, k))
        for start, end in fold_segments(traj.turns):
            for a, b in zip(traj.turns[start:end], traj.turns[start + 1:end]):  # each segment only grows
                assert b.prompt_ids[:len(a.prompt_ids) + len(a.response_ids)] == a.prompt_ids + a.response_ids
            if start > 0:  # a new segment holds the summary's generated ids, as generated
                summary, first = traj.turns[start - 1], traj.turns[start]
                assert is_summary(summary) and "fold_message" in first.info
                ids, sub = list(first.prompt_ids), list(summary.response_ids)
                assert any(ids[i:i + len(sub)] == sub for i in range(len(ids) - len(sub) + 1))
                assert summary.observation.endswith(FOLD_REQUEST) and first.observation == \
                    summary.observation[:-len(FOLD_REQUEST)]


def test_summary_turns_do_not_step_the_env_and_do_not_count_as_turns():
    steps = []

    def counting(context):
        if not context.observation.endswith(FOLD_REQUEST):
            steps.append(context.observation)
        return oracle_or_summary(context)

    [traj] = run(policy=counting)[:1]
    env_turns = [t for t in traj.turns if not is_summary(t)]
    summaries = [t for t in traj.turns if is_summary(t)]
    assert all(t.reward == 0.0 and t.valid for t in summaries)
    assert sum(t.reward for t in env_turns) == traj.total_reward
    assert env_steps(traj) == len(env_turns) < len(traj.turns)  # what the oracle check counts against the limit
    # the same task in the trajectory layout with room to spare takes exactly the env turns
    [whole] = rollout("agentgym/Toy-KeyDoor-Long-v0", ScriptedPolicy(oracle_or_summary, CHAT), CHAT, seeds=[3],
                      config=RolloutConfig(max_context_tokens=None, max_turns=40, executor="serial"),
                      env_kwargs=LONG_KEYDOOR)
    assert [t.action for t in env_turns] == [t.action for t in whole.turns]
    # max_turns counts env turns: a limit of exactly the env turns still lets the episode finish
    config = RolloutConfig(layout="fold", max_context_tokens=1000, max_turns=len(env_turns), executor="serial",
                           sampling=SamplingParams(max_tokens=64))
    [capped] = rollout("agentgym/Toy-KeyDoor-Long-v0", ScriptedPolicy(oracle_or_summary, CHAT), CHAT, seeds=[3],
                       config=config, env_kwargs=LONG_KEYDOOR)
    assert capped.success and len(capped.turns) == len(traj.turns)


def test_fold_without_a_model_summary_uses_the_env_state():
    for traj in run(fold_summary=False):
        assert traj.success and not any(is_summary(t) for t in traj.turns)
        starts = [traj.turns[a] for a, _ in fold_segments(traj.turns)[1:]]
        assert starts and all(t.info["fold_message"].endswith(t.observation) for t in starts)
        for k, turn in enumerate(traj.turns):
            CHAT.verify(turn.prompt_ids, fold_messages(CHAT, traj, k))


def test_async_fold_matches_sync():
    sync, asyn = run(), run(async_mode=True)
    assert [[t.prompt_ids for t in tr.turns] for tr in sync] == [[t.prompt_ids for t in tr.turns] for tr in asyn]


def test_household_fold_message_carries_the_visited_receptacles():
    config = RolloutConfig(layout="fold", fold_at_tokens=700, max_context_tokens=8192, executor="serial",
                           sampling=SamplingParams(max_tokens=64))
    [traj] = rollout("agentgym/Household-PickPlace-v0", ScriptedPolicy(oracle_or_summary, CHAT), CHAT, seeds=[5],
                     config=config)
    messages = [t.info["fold_message"] for t in traj.turns if "fold_message" in t.info]
    assert traj.success and messages
    assert "Visited:" in messages[0] and "earlier turn(s) folded away" in messages[0]
    for k, turn in enumerate(traj.turns):
        CHAT.verify(turn.prompt_ids, fold_messages(CHAT, traj, k))


def test_state_summary_of_a_household_episode():
    env = make("agentgym/Household-v0")
    env.reset(seed=1)
    assert "Visited: nothing yet" in env.state_summary()
    for _ in range(3):
        env.step(env.unwrapped.oracle_action())
    assert "Visited:" in env.state_summary() and "nothing yet" not in env.state_summary()


def test_summary_turns_are_rows_of_the_turn_table():
    trajs = run()
    table = TurnTable.from_trajectories(trajs)
    assert len(table) == sum(len(t.turns) for t in trajs)  # each summary is a turn: the outcome's credit reaches it


@pytest.mark.parametrize("kwargs,match", [
    ({"layout": "fold", "max_context_tokens": None}, "folds at a budget"),
    ({"layout": "fold", "fold_at_tokens": 0}, "fold_at_tokens must be >= 1"),
    ({"layout": "folded"}, "layout must be one of"),
])
def test_bad_fold_config_is_a_config_error(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        RolloutConfig(**kwargs)


def test_tito_across_folds_with_real_chat_templates(tokenizer):  # noqa: F811 (the fixture)
    """SmolLM2's, Llama-3's and Qwen2.5's templates: every folded prompt is the template's tokenisation."""
    chat = ChatFormat.from_tokenizer(tokenizer)
    config = RolloutConfig(layout="fold", max_context_tokens=600, max_turns=40, executor="serial",
                           sampling=SamplingParams(max_tokens=48))
    trajs = rollout("agentgym/Toy-KeyDoor-Long-v0", ScriptedPolicy(oracle_or_summary, chat), chat, seeds=[3],
                    config=config, env_kwargs=LONG_KEYDOOR)
    for traj in trajs:
        assert traj.success and sum(is_summary(t) for t in traj.turns) >= 1
        for k, turn in enumerate(traj.turns):
            chat.verify(turn.prompt_ids, fold_messages(chat, traj, k))


class LongObservationAt(TextEnv):
    """30 short turns to success, except that turn `at` answers with a long observation."""

    def __init__(self, at: int = 1):
        self.at, self.turn = at, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.turn = 0
        return "Say anything, 30 times.", make_info()

    def step(self, action):
        self.turn += 1
        obs = "noise " * 60 if self.turn == self.at else f"Turn {self.turn} done."
        done = self.turn == 30
        return obs, float(done), done, False, make_info(success=done)


def test_a_long_observation_just_under_the_fold_budget_still_fits_the_summary_request():
    """One turn can carry a prompt from just under the fold budget past the context limit (an observation of up
    to max_observation_tokens). The summary request then gets the observation cut to the room left (the next
    segment gets all of it), so whatever turn it lands on, the episode folds instead of ending context_full."""
    agentgym.register("test/LongObservationAt-v0", LongObservationAt, max_turns=40, override=True)

    def reply(context):
        return "Summary: thirty turns asked, some done." if context.observation.endswith(FOLD_REQUEST) else "ok"

    config = RolloutConfig(layout="fold", max_context_tokens=1000, max_observation_tokens=400, executor="serial",
                           sampling=SamplingParams(max_tokens=64))
    cut = 0
    for at in range(1, 30):  # turn 30 ends the episode: no turn sees its observation
        [traj] = rollout("test/LongObservationAt-v0", ScriptedPolicy(reply, CHAT), CHAT, seeds=[0], config=config,
                         env_kwargs={"at": at})
        assert traj.success and traj.end_reason == "terminated", (at, traj.end_reason)
        assert max(len(t.prompt_ids) + 64 for t in traj.turns) <= 1000
        for k, turn in enumerate(traj.turns):
            CHAT.verify(turn.prompt_ids, fold_messages(CHAT, traj, k))
        summaries = [t for t in traj.turns if is_summary(t)]
        cut += any(TRUNCATION_MARKER.format("")[:12] in t.observation for t in summaries)
        big = next(t for t in traj.turns if t.observation.startswith("noise") and not is_summary(t))
        assert big.observation == "noise " * 60  # the env turn sees all of it
    assert cut >= 1  # some placement needed the cut (without it those episodes ended context_full)
