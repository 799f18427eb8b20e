"""The trainer on a CUDA GPU against the same trainer on the CPU: one update on the same batch of episodes
takes the same step (the token path, with a shared or a separate critic, and the admissible-choice path), and
bf16 on the GPU trains. Marked gpu: skipped without one (the CPU runs of these paths are in test_trainer.py and
test_choice.py)."""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentgym.train.config import load_config  # noqa: E402
from agentgym.train.trainer import Trainer  # noqa: E402
from test_fsdp import _assert_same_weights  # noqa: E402  (tests/train is on sys.path, rootdir-less)

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

SMALL = ["rollout.groups=2", "rollout.group_size=4", "eval.every=0", "train.mini_batches=2",
         "train.micro_batch_size=16", "logging.progress=false", "algorithm.regularisers.kl_coef=0.05"]
CHOICE = ["rollout.action_mode=admissible", "rollout.max_new_tokens=3", "model.train_layers=1"]
STEP_KEYS = ("policy_loss", "grad_norm", "kl", "entropy")
CRITIC_KEYS = ("value_loss", "critic_grad_norm")


def _trainer(run_dir: Path, device: str, *extra: str) -> Trainer:
    return Trainer(load_config("toy_learning", [f"train.run_dir={run_dir}", *SMALL, f"model.device={device}",
                                                *extra]))


def _weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().float().cpu().clone() for k, v in trainer.model.state_dict().items()}


def _one_step_each(tmp_path: Path, *extra: str) -> tuple[dict, dict, dict, dict, dict]:
    """(CPU metrics, CUDA metrics, CPU weights, CUDA weights, start weights) after one update of each trainer
    on the episodes the CPU trainer played (both start from the same tiny model: it is built from seed 0)."""
    cpu, gpu = _trainer(tmp_path / "cpu", "cpu", *extra), _trainer(tmp_path / "gpu", "cuda", *extra)
    try:
        start = _weights(cpu)
        collected = cpu.collect(0)
        cpu.collect = gpu.collect = lambda iteration: collected  # type: ignore[method-assign]
        m_cpu, m_gpu = cpu.step(), gpu.step()
        assert next(gpu.model.parameters()).is_cuda
        return m_cpu, m_gpu, _weights(cpu), _weights(gpu), start
    finally:
        cpu.close()
        gpu.close()


def _assert_same_step(m_cpu: dict, m_gpu: dict, w_cpu: dict, w_gpu: dict, start: dict, keys=STEP_KEYS) -> None:
    assert m_cpu["episodes_trained"] == m_gpu["episodes_trained"] > 0 and m_gpu["gpu/peak_memory_gib"] > 0
    # fp32 on both, the sums in another order. On an H100 (torch 2.11+cu130): gradient norms 1e-5 relative
    # apart or closer, value losses 2e-7, the weights after the step 9.3e-5 at most (printed here)
    for key in keys:
        print(f"{key}: cpu {m_cpu[key]:.8g} cuda {m_gpu[key]:.8g}")
        assert m_gpu[key] == pytest.approx(m_cpu[key], rel=1e-4, abs=1e-7), key
    moved = [k for k in w_cpu if not torch.equal(w_cpu[k], start[k])]
    assert moved  # the step really moved weights
    gap = max(float((w_gpu[k] - w_cpu[k]).abs().max()) for k in w_cpu)
    print(f"largest weight gap {gap:.3g} over {len(moved)} moved tensors")
    _assert_same_weights(w_gpu, w_cpu, len(w_cpu))  # the FSDP tests' bounds, every tensor


def test_token_update_on_cuda_equals_the_cpu_update(tmp_path: Path):
    _assert_same_step(*_one_step_each(tmp_path))


@pytest.mark.parametrize("critic", ["shared", "separate"])
def test_critic_update_on_cuda_equals_the_cpu_update(tmp_path: Path, critic: str):
    m_cpu, m_gpu, *weights = _one_step_each(tmp_path, "algorithm.estimator=turn_gae", f"model.critic={critic}")
    assert m_cpu["return"] > 0 and m_cpu["value_loss"] > 0  # a rewarded batch: the value head has targets
    _assert_same_step(m_cpu, m_gpu, *weights, keys=STEP_KEYS + CRITIC_KEYS)


def test_choice_update_on_cuda_equals_the_cpu_update(tmp_path: Path):
    """The household preset's path: candidates scored over the admissible actions, the top layer trained on
    the frozen trunk's output, a KL reference sharing that trunk."""
    m_cpu, m_gpu, *weights = _one_step_each(tmp_path, *CHOICE)
    assert m_gpu["choice_turns"] == m_cpu["choice_turns"] > 0
    _assert_same_step(m_cpu, m_gpu, *weights)


@pytest.mark.parametrize("extra", [[], CHOICE])
def test_bf16_on_cuda_trains(tmp_path: Path, extra):
    trainer = _trainer(tmp_path, "cuda", "model.dtype=bfloat16", "train.iterations=2", *extra)
    try:
        start = _weights(trainer)
        trainer.run()
        assert next(trainer.model.parameters()).dtype == torch.bfloat16
        assert any(not torch.equal(v, start[k]) for k, v in _weights(trainer).items())
    finally:
        trainer.close()
    rows = [line for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and '"policy_loss": NaN' not in rows[-1]
