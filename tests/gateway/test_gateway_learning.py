"""The worked example learns: the tiny model trained through the gateway on an outside harness (openai client
only, its own key-door game) for a few iterations of the trainer, its success rising. ~2 min on 2 cores."""
from __future__ import annotations

import json

import pytest

from agentgym.errors import ConfigError


def config(tmp_path, iterations: int, *extra: str):
    from agentgym.train.config import load_config

    return load_config("toy_learning", [f"train.iterations={iterations}", f"train.run_dir={tmp_path / 'run'}",
                                        "eval.every=0", "rollout.layout=trajectory", "train.verify_tokens=false",
                                        "rollout.groups=4", "rollout.group_size=8", "train.seed=0",
                                        "logging.progress=false", *extra])


def test_an_in_training_eval_is_refused(tmp_path):
    from agentgym.train.gateway.training import train_harness

    with pytest.raises(ConfigError, match="eval.every=0"):
        train_harness(config(tmp_path, 1, "eval.every=1"), lambda run: 0.0, lambda seed: {})


def test_the_registry_names_the_gateway_collector_and_a_config_alone_cannot_build_it():
    from agentgym.train.collectors import build_collector, collectors

    assert "gateway" in collectors()
    with pytest.raises(ConfigError, match="train_harness"):
        build_collector("gateway", None, {})


def test_refused_settings(tmp_path):
    from agentgym.train.gateway.training import train_harness

    with pytest.raises(ConfigError, match="train.verify_tokens=false"):
        train_harness(config(tmp_path, 1, "train.verify_tokens=true"), lambda run: 0.0, lambda seed: {})


def test_a_rewritten_session_under_the_trajectory_layout_is_refused_with_the_fix(tmp_path):
    from types import SimpleNamespace

    from agentgym.train.gateway.merge import session_trajectory
    from agentgym.train.gateway.sessions import Call, Session
    from agentgym.train.gateway.training import GatewayTrainCollector

    calls = [Call(0, (1, 2), (3,), (-0.1,), "a", "stop"), Call(1, (1, 9), (4,), (-0.1,), "b", "stop")]
    traj = session_trajectory(Session("s", task="t", calls=calls, reward=1.0, status="closed"), 0, 0)

    class Inner:
        next_seed = 0

        def collect(self, iteration):
            return [traj, traj], [traj, traj], {}

    for layout, ok in (("trajectory", False), ("fold", True), ("step", True)):
        ctx = SimpleNamespace(config=config(tmp_path, 1, f"rollout.layout={layout}"))
        collector = GatewayTrainCollector(ctx, {"next_seed": 7}, Inner())
        if ok:
            assert len(collector.collect(0).batch) == 2
        else:
            with pytest.raises(ConfigError, match="rewrote its history at call 1.*rollout.layout=fold"):
                collector.collect(0)


def test_a_seeded_call_samples_the_same_whatever_shares_its_batch(tiny_policy):
    """Why the learning test's harness sends a seed: unseeded rows draw from one shared generator, so a
    call's sample depends on which calls the engine batched with it (thread timing); a seeded row has its own."""
    from agentgym.policy import GenerationRequest, SamplingParams

    policy, chat = tiny_policy
    prompt = tuple(chat.expected_ids([{"role": "user", "content": "room 0 . key here . door right ."}],
                                     add_generation_prompt=True))
    others = [GenerationRequest(prompt[:-2] + prompt[-1:], SamplingParams(temperature=1.0, max_tokens=3, seed=7)),
              GenerationRequest(prompt, SamplingParams(temperature=1.0, max_tokens=5))]
    for seed in range(6):
        mine = GenerationRequest(prompt, SamplingParams(temperature=1.0, max_tokens=4, seed=seed))
        alone = policy.generate([mine])[0]
        assert policy.generate([others[0], mine, others[1]])[1].token_ids == alone.token_ids
        assert policy.generate([mine, *others])[0].token_ids == alone.token_ids


@pytest.mark.slow
def test_the_example_harness_learns_through_the_gateway(tmp_path):
    pytest.importorskip("openai")
    from harness_keydoor import play

    from agentgym.train.gateway.training import train_harness

    # every call seeded (task seed, run, turn): its sample depends on the weights alone, not on thread timing
    # (which sessions' calls share its batch), so the run is the same each time, under load too
    run_dir = train_harness(config(tmp_path, 10), lambda run: play(run.base_url, run.api_key, run.task,
                                                                   seed=run.seed * 100 + run.sample)["reward"],
                            lambda seed: {"seed": seed, "max_turns": 8}, workers=8)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 10
    success = [r["success"] for r in rows]
    returns = [r["return"] for r in rows]
    print("success", success, "return", returns)   # shown with pytest -rP
    # this run (train.seed 0), the same alone or beside another: success 0, 0, .06, .12, .31, .12, .53, .16, .47,
    # .41; return .06 -> .89. Learning in 10 iterations is not sure on every seed (with other call seeds, 2 of
    # train.seed 0-3 stayed at the key's 0.5 return), which is why the run is made reproducible, not left to luck
    assert sum(success[-3:]) / 3 >= sum(success[:2]) / 2 + 0.15 and max(success[-3:]) >= 0.2, success
    assert sum(returns[-3:]) / 3 > sum(returns[:2]) / 2 + 0.3, returns
    for r in rows:   # every call merged into its session's one sequence; sampler and trainer log-probs agree
        assert r["gateway/segments_per_session"] == 1.0 and r["gateway/failed_sessions"] == 0
        assert r["logprob_diff"] < 1e-3 and r["gateway/lost_calls"] == 0
    assert (run_dir / "latest").exists()   # the trained weights, saved as a checkpoint
