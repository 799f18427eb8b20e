"""End-to-end trainer runs on the tiny word-level model: learning (GiGPO, GRPO), kill-and-resume, CLI."""
from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentgym.train.config import load_config
from agentgym.train.metrics import read_metrics
from agentgym.train.trainer import Trainer, train

pytest.importorskip("transformers")

SMALL = ["rollout.groups=2", "rollout.group_size=4", "eval.every=0", "train.mini_batches=2",
         "train.micro_batch_size=16"]
DETERMINISTIC_KEYS = ("success", "return", "turns", "valid_action_rate", "policy_loss", "grad_norm", "clip_fraction",
                      "approx_kl", "advantage_std", "entropy")


def small_config(run_dir: Path, *extra: str):
    return load_config("toy_learning", [f"train.run_dir={run_dir}", *SMALL, *extra])


def _separate_policy(monkeypatch, recorder: list | None = None):
    """Rollouts from an HF policy holding its own copy of the weights, as a vLLM engine does."""
    import copy

    from agentgym.policies.hf import HFPolicy
    from agentgym.train import setup

    class Separate(HFPolicy):
        def generate(self, requests):
            if recorder is not None and (not recorder or recorder[-1] != "generate"):
                recorder.append("generate")
            return super().generate(requests)

        def sleep(self, level=1):
            recorder is not None and recorder.append(f"sleep {level}")

        def update_weights(self, state_dict):
            recorder is not None and recorder.append("update_weights")
            super().update_weights(state_dict)

    monkeypatch.setattr(setup, "make_policy", lambda cfg, model, tok: Separate(copy.deepcopy(model), tok))


@pytest.mark.parametrize("extra", [[], ["model.lora.enabled=true", "model.lora.target_modules=[q_proj, v_proj]"],
                                   ["separate-rollout-policy"]])
def test_kill_and_resume_gives_the_same_next_iteration(tmp_path: Path, extra, monkeypatch, train_device):
    if extra == ["separate-rollout-policy"]:  # resume must push the restored weights to it
        _separate_policy(monkeypatch)
        extra = []
    extra = [*extra, f"model.device={train_device}"]  # on CUDA the sampler's RNG state is saved and restored too
    full = train(small_config(tmp_path / "full", "train.iterations=3", *extra))
    # "killed" after iteration 2: a run that stops there, then a fresh trainer resuming from its checkpoint
    part = tmp_path / "part"
    train(small_config(part, "train.iterations=2", *extra))
    assert (part / "latest").read_text() == "ckpt-2"
    train(small_config(part, "train.iterations=3", "checkpoint.resume=auto", *extra))
    a, b = read_metrics(full), read_metrics(part)
    assert [m["iteration"] for m in b] == [0, 1, 2]
    assert sorted({json.loads(l)["iteration"] for l in (part / "rollouts.jsonl").read_text().splitlines()}) == [0, 1, 2]
    for key in DETERMINISTIC_KEYS:
        assert a[2][key] == pytest.approx(b[2][key], rel=1e-6, abs=1e-9), key
    assert (part / "ckpt-3" / "model" / "model.safetensors").exists()


def test_a_fresh_run_is_refused_where_an_earlier_run_logged(tmp_path: Path):
    """A fresh run would append its rows to the earlier run's metrics.jsonl (two runs' curves in one file)."""
    from agentgym.errors import ConfigError

    run = tmp_path / "run"
    train(small_config(run, "train.iterations=1"))
    before = (run / "metrics.jsonl").read_text()
    with pytest.raises(ConfigError, match=r"already holds a run .*checkpoint.resume=auto.*another train.run_dir"):
        Trainer(small_config(run, "train.iterations=1"))
    assert (run / "metrics.jsonl").read_text() == before  # nothing of the earlier run lost
    train(small_config(run, "train.iterations=1", "checkpoint.resume=auto"))  # finished: continues to nothing
    assert (run / "metrics.jsonl").read_text() == before


def test_resume_auto_with_no_checkpoint_redoes_the_logged_rows(tmp_path: Path):
    """Rows logged before any checkpoint (a run killed early) are redone, not appended to."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"iteration": 0, "success": 0.5}\n')
    train(small_config(run, "train.iterations=1", "checkpoint.resume=auto"))
    rows = read_metrics(run)
    assert [m["iteration"] for m in rows] == [0] and "policy_loss" in rows[0]  # the new run's row, alone


def test_checkpoint_model_loads_as_a_policy(tmp_path: Path):
    run = train(small_config(tmp_path / "r", "train.iterations=1"))
    cfg = small_config(tmp_path / "again", "train.iterations=1", f"model.policy=checkpoint:{run}")
    trainer = Trainer(cfg)
    try:
        assert trainer.model.config.vocab_size == len(trainer.tokenizer)
    finally:
        trainer.close()


@pytest.mark.parametrize("extra", [
    ["algorithm.estimator=turn_gae", "model.critic=shared", "algorithm.loss.ratio_level=turn"],
    ["algorithm.estimator=bi_level_gae", "model.critic=shared", "algorithm.regularisers.kl_coef=0.1", "algorithm.regularisers.entropy_coef=0.01",
     "logging.tensorboard=true"],
    ["algorithm.estimator=turn_gae", "model.critic=separate"],
    ["algorithm.gigpo.similarity=0.9", "algorithm.norm=mean", "algorithm.episode_stats=turn",
     "algorithm.dynamic_sampling=true", "algorithm.dynamic_sampling_keep=advantages"],
    ["algorithm.estimator=rloo", "algorithm.dynamic_sampling=true", "algorithm.loss.ratio_level=sequence",
     "algorithm.turn_cap_schedule=[[0, 2]]", "rollout.layout=trajectory"],
    ["algorithm.estimator=reinforce_pp", "model.lora.enabled=true", "model.lora.target_modules=[q_proj, v_proj]",
     "algorithm.regularisers.kl_coef=0.05", "algorithm.loss.dual_clip=3"],
    ["algorithm.loss.tis_cap=2", "algorithm.shaping.overlong=mask", "algorithm.shaping.invalid_penalty=0.1",
     "algorithm.shaping.invalid_penalty_mode=advantage", "train.verify_samples=5"],
    ["algorithm.estimator=turn_gae", "model.critic=separate", "rollout.max_turns=2", "algorithm.gae.whiten_advantages=true",
     "algorithm.value.clip_scale=returns_std", "optim.critic_max_grad_norm=0.5", "algorithm.shaping.overlong=penalty"],
])
def test_every_estimator_and_option_runs_an_iteration(tmp_path: Path, extra, train_device):
    run = train(small_config(tmp_path / "r", "train.iterations=1", f"model.device={train_device}", *extra))
    [m] = read_metrics(run)
    assert m["samples"] > 0 and m["grad_norm"] >= 0 and m["logprob_diff"] < 1e-3
    assert (m["gpu/peak_memory_gib"] > 0) if train_device == "cuda" else "gpu/peak_memory_gib" not in m
    assert m["verified_samples"] == (5 if "train.verify_samples=5" in extra else m["samples"])
    if any(e.startswith("model.critic=") for e in extra):
        # the value head starts at 0, so its loss is 0 when every target is 0: nothing rewarded and, with
        # overlong=penalty, no response cut (a cut turn's reward carries the penalty, so a batch with return 0
        # still has targets). The CPU's batches here are rewarded, CUDA's sampler drew unrewarded ones
        # (test_cuda.py compares the devices)
        rewarded = m["return"] != 0
        penalised = "algorithm.shaping.overlong=penalty" in extra and m["overlong_rate"] > 0
        assert rewarded or train_device == "cuda"
        assert (m["value_loss"] > 0 and m["critic_grad_norm"] > 0) == (rewarded or penalised)
    if "algorithm.loss.tis_cap=2" in extra:  # the sampler is the trained model itself: weights 1
        assert m["tis/weight_mean"] == pytest.approx(1.0, abs=1e-3)
        # max_new_tokens=1: every one-word response is cut at the limit, so every action token is masked
        assert m["overlong_rate"] == 1.0 and m["overlong/masked_tokens"] == m["samples"]
    if "logging.tensorboard=true" in extra:
        assert list((run / "tensorboard").glob("events.*"))
    if "algorithm.turn_cap_schedule=[[0, 2]]" in extra:
        assert m["turns"] <= 2 and "groups_kept" in m
    if "algorithm.dynamic_sampling_keep=advantages" in extra:
        assert m["groups_kept"] > 0 and "groups_dropped" in m


def test_cli_bad_override_is_one_line(tmp_path: Path):
    proc = subprocess.run([sys.executable, "-m", "agentgym.train", "toy_learning", "algorithm.gama=0.9"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "Did you mean 'algorithm.gamma'" in proc.stderr


def test_cli_prints_resolved_config():
    proc = subprocess.run([sys.executable, "-m", "agentgym.cli", "train", "--print-config", "toy_learning",
                           "algorithm.estimator=grpo"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "estimator: grpo" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "agentgym.cli", "train", "--print-config", "household_gpu_vllm"],
                          capture_output=True, text=True, timeout=60)
    for line in ("success_reward: 10.0", "invalid_penalty_mode: advantage", "tis_cap: 2.0", "overlong: penalty",
                 "keep_task: true", "sleep_level: 1", "verify_samples: 0"):
        assert line in proc.stdout, line


@pytest.mark.slow
@pytest.mark.parametrize("estimator,iterations", [("gigpo", 10), ("grpo", 14)])
def test_tiny_model_learns_the_toy_env(tmp_path: Path, estimator, iterations):
    """A random 2-layer Llama goes from ~0 to >= 0.9 success (held-out seeds, greedy) in a few iterations
    (GRPO, without step-level credit, needs a few more)."""
    run = train(load_config("toy_learning", [f"train.run_dir={tmp_path}", f"algorithm.estimator={estimator}",
                                             f"train.iterations={iterations}", f"eval.every={iterations}"]))
    metrics = read_metrics(run)
    assert metrics[0]["success"] <= 0.3, metrics[0]
    assert metrics[-1]["eval/success"] >= 0.9, [m["success"] for m in metrics]
    # sampled (temperature 1) training success: at least one of the last iterations at >= 0.9
    assert max(m["success"] for m in metrics[-4:]) >= 0.9, [m["success"] for m in metrics]


def test_weights_are_pushed_to_a_separate_rollout_policy(tmp_path: Path, monkeypatch):
    """A rollout engine that holds its own copy of the weights (as vLLM does) gets the new ones each iteration,
    and sleeps (frees its KV cache) while the trainer updates."""
    import torch

    calls: list[str] = []
    _separate_policy(monkeypatch, calls)
    trainer = Trainer(small_config(tmp_path, "train.iterations=1"))
    try:
        assert trainer.policy.model is not trainer.model
        before = {k: v.clone() for k, v in trainer.policy.model.state_dict().items()}
        trainer.step()
        after, trained = trainer.policy.model.state_dict(), trainer.model.state_dict()
        assert any(not torch.equal(before[k], after[k]) for k in after)
        assert all(torch.equal(after[k], trained[k]) for k in after)
        assert calls == ["generate", "sleep 1", "update_weights"]
    finally:
        trainer.close()


def test_failed_episodes_are_not_trained_on(tmp_path: Path):
    import dataclasses

    trainer = Trainer(small_config(tmp_path, "train.iterations=1"))
    play = trainer.collector.ctx.play

    def with_a_failure(*args, **kwargs):
        trajs = play(*args, **kwargs)
        return [dataclasses.replace(trajs[0], end_reason="failed", error="env crashed"), *trajs[1:]]

    trainer.collector.ctx.play = with_a_failure
    try:
        collected = trainer.collector.collect(0)
        batch, first, stats = collected.batch, collected.first, collected.stats
        assert len(first) == 8 and len(batch) == 7 and all(t.end_reason != "failed" for t in batch)
        assert stats["failed_dropped"] == 1.0
        m = trainer.step()
        assert m["failed_dropped"] == 1.0 and m["failed_episodes"] == 1.0
    finally:
        trainer.close()


def test_lora_pushes_the_adapter_to_a_policy_that_takes_one(tmp_path: Path, monkeypatch):
    """With LoRA, an engine that serves adapters (vLLM's LoRARequest) gets the saved adapter, not a merged copy."""
    from agentgym.policies.hf import HFPolicy
    from agentgym.train import setup

    pushed: list[str] = []

    class AdapterEngine(HFPolicy):
        takes_adapters = True

        def update_adapter(self, path):
            pushed.append(path)

        def update_weights(self, state_dict):
            raise AssertionError("a LoRA run must not merge and push full weights")

    def make(cfg, model, tok):
        policy = AdapterEngine(model, tok)
        policy.model = object()  # generates through `model` but counts as a separate engine
        policy.generate = lambda requests, _p=HFPolicy(model, tok): _p.generate(requests)
        return policy

    monkeypatch.setattr(setup, "make_policy", make)
    train(small_config(tmp_path, "train.iterations=2", "model.lora.enabled=true",
                       "model.lora.target_modules=[q_proj, v_proj]"))
    assert [Path(p).name for p in pushed] == ["iteration-0", "iteration-1"]
    assert (Path(pushed[-1]) / "adapter_model.safetensors").exists() and not Path(pushed[0]).exists()


def test_lora_pushes_merged_weights_to_a_policy_without_lora_layers(tmp_path: Path, monkeypatch):
    """An engine that serves no adapters (vLLM started without enable_lora: model.vllm.lora_push=merged) gets the
    adapter merged into a copy of the weights: plain names, the trained model itself still a LoRA model."""
    import torch

    from agentgym.policies.hf import HFPolicy
    from agentgym.train import setup

    pushed: list[dict] = []

    class PlainEngine(HFPolicy):
        takes_adapters = False

        def update_adapter(self, path):
            raise AssertionError("this engine has no LoRA layers")

        def update_weights(self, state_dict):
            pushed.append({k: v.clone() for k, v in state_dict.items()})

    def make(cfg, model, tok):
        policy = PlainEngine(model, tok)
        policy.model = object()  # a separate engine, as above
        policy.generate = lambda requests, _p=HFPolicy(model, tok): _p.generate(requests)
        return policy

    monkeypatch.setattr(setup, "make_policy", make)
    trainer = Trainer(small_config(tmp_path, "train.iterations=1", "model.lora.enabled=true",
                                   "model.lora.target_modules=[q_proj, v_proj]"))
    try:
        trainer.step()
        assert hasattr(trainer.model, "peft_config") and len(pushed) == 1
        assert not [k for k in pushed[0] if "lora" in k]
        merged = copy.deepcopy(trainer.model).merge_and_unload().state_dict()
        assert set(pushed[0]) == set(merged)
        assert all(torch.equal(pushed[0][k], merged[k]) for k in merged)
    finally:
        trainer.close()


def test_periodic_evals_keep_per_task_records_and_pair_with_the_previous_one(tmp_path: Path, monkeypatch):
    """Every periodic eval writes one record per held-out episode, and from the second eval on (also across a
    resume) its metrics row says how many tasks were newly solved / failed since the previous one."""
    import dataclasses

    from agentgym.eval.paired import mcnemar_exact
    from agentgym.train.eval_records import EVAL_EPISODES, last_eval

    # the untrained tiny model solves nothing; which held-out tasks count as solved after each iteration is
    # set here, so tasks are both gained and lost between evals (rank of the task among the eval's seeds)
    solved_after = {1: {0, 1}, 2: {0, 2, 3}, 3: {4}}
    real = Trainer.eval_episodes

    def scripted(self):
        episodes = sorted(real(self), key=lambda t: t.seed)
        return [dataclasses.replace(t, success=i in solved_after[self.iteration]) for i, t in enumerate(episodes)]

    monkeypatch.setattr(Trainer, "eval_episodes", scripted)

    def records_by_row(run: Path) -> dict[int, dict[tuple, bool]]:
        out: dict[int, dict[tuple, bool]] = {}
        for line in (run / EVAL_EPISODES).read_text().splitlines():
            r = json.loads(line)
            out.setdefault(r["iteration"], {})[(r["env"], r["seed"])] = r["outcome"] == "success"
        return out

    run = tmp_path / "run"
    evals = ["eval.every=1", "eval.seeds=6", "checkpoint.every=1", "checkpoint.resume=auto"]
    train(small_config(run, "train.iterations=2", *evals))
    train(small_config(run, "train.iterations=3", *evals))  # resumes after iteration 2
    rows = records_by_row(run)
    metrics = read_metrics(run)
    assert sorted(rows) == [0, 1, 2] and all(len(r) == 6 for r in rows.values())
    assert "eval/newly_solved" not in metrics[0]
    for i in (1, 2):  # iteration 2 was paired with iteration 1's records, read back from the file on resume
        before, after = rows[i - 1], rows[i]
        gained = sum(after[k] and not before[k] for k in after)
        lost = sum(before[k] and not after[k] for k in after)
        assert (metrics[i]["eval/newly_solved"], metrics[i]["eval/newly_failed"]) == (gained, lost)
        assert metrics[i]["eval/paired_p"] == mcnemar_exact(gained, lost)
        assert metrics[i]["eval/success"] == sum(after.values()) / 6
    assert [(m["eval/newly_solved"], m["eval/newly_failed"]) for m in metrics[1:]] == [(2, 1), (1, 3)]
    assert [r["iteration"] for r in last_eval(run)] == [2] * 6
