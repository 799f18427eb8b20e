"""EPO: worked examples of the trajectory entropy, the band penalty and the adaptive weight; its gradient
pushes a collapsed policy's entropy back up; a trainer iteration with EPO (and HGPO) on the tiny model."""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from agentgym.train.updaters import losses as L  # noqa: E402


def example():
    # traj 0: tokens with entropy 1, 3 -> 2;  traj 1: 2 (sample 0) and 4, 6 (sample 1) -> 4;  H = (2 + 4) / 2 = 3
    entropy = torch.tensor([[1.0, 3.0, 2.0], [4.0, 6.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    traj = torch.tensor([[0, 0, 1], [1, 1, 0]])
    return entropy, mask, traj


def test_trajectory_entropy_weighs_trajectories_not_tokens():
    assert L.trajectory_entropy(*example()).item() == pytest.approx(3.0)
    # the token mean would be 16/5 = 3.2: a long trajectory must not dominate
    e, m, _ = example()
    assert (e * m).sum().item() / m.sum().item() == pytest.approx(3.2)


@pytest.mark.parametrize("running,loss,weight", [
    (None, -0.3, 0.1),            # first batch: plain bonus −β·H
    (3.0, -0.3, 0.1),             # inside the band [1.5, 4.5]: no penalty, β_eff = β·H̄/H = β
    (10.0, -0.6 + 4.0, 0.2),      # below [5, 15]: penalty (5 − 3)² = 4; β_eff = β·min(2, 10/3) = 2β
    (1.0, -0.1 + 2.25, 0.1 / 3),  # above [0.5, 1.5]: penalty (3 − 1.5)² = 2.25; β_eff = β/3
])
def test_epo_regulariser_worked_example(running, loss, weight):
    out = L.epo_regulariser(*example(), coef=0.1, running=running, band=(0.5, 1.5), smooth_coef=1.0)
    assert out.loss.item() == pytest.approx(loss) and out.weight == pytest.approx(weight) and out.entropy == 3.0


def test_running_entropy():
    assert L.running_entropy(None, 2.0, 0.9) == 2.0
    assert L.running_entropy(2.0, 4.0, 0.9) == pytest.approx(2.2)


def test_epo_gradient_raises_a_collapsed_entropy():
    logits = torch.tensor([[[4.0, 0.0, 0.0, 0.0]] * 3], requires_grad=True)  # near-deterministic, 3 tokens
    mask, traj = torch.ones(1, 3), torch.zeros(1, 3, dtype=torch.long)
    before = L.entropy_from_logits(logits).mean().item()
    opt = torch.optim.SGD([logits], lr=4.0)
    for _ in range(40):
        opt.zero_grad()
        out = L.epo_regulariser(L.entropy_from_logits(logits), mask, traj, coef=0.1, running=1.0)
        out.loss.backward()
        opt.step()
    after = L.entropy_from_logits(logits).mean().item()
    assert before < 0.5 * 1.0 < after <= 1.5 * 1.0 + 0.2  # pulled into the band around H̄ = 1


def test_epo_and_hgpo_run_a_trainer_iteration(tmp_path: Path):
    pytest.importorskip("transformers")
    from agentgym.train.config import load_config
    from agentgym.train.metrics import read_metrics
    from agentgym.train.trainer import Trainer

    cfg = load_config("toy_learning", [f"train.run_dir={tmp_path}", "rollout.groups=2", "rollout.group_size=4",
                                       "eval.every=0", "train.iterations=2", "algorithm.estimator=hgpo",
                                       "algorithm.epo_coef=0.01"])
    trainer = Trainer(cfg)
    trainer.run()
    metrics = read_metrics(tmp_path)
    assert len(metrics) == 2 and all(m["epo_entropy"] > 0 and m["epo_weight"] > 0 for m in metrics)
    assert trainer.epo_running is not None and trainer.epo_running > 0
