"""train.change_kept: the final weights keep a share of training's change (start + kept x (trained - start)),
the final checkpoint holds the merge and the trained weights beside it, a resume trains on from the trained
ones, and values the merge cannot honour are refused."""
from __future__ import annotations

import json

import pytest

from agentgym.errors import ConfigError
from agentgym.train.config import config_from_dict, load_config
from agentgym.train.merge import interpolate

torch = pytest.importorskip("torch")
SMALL = ["rollout.groups=2", "rollout.group_size=2", "rollout.max_new_tokens=4", "eval.every=0",
         "logging.progress=false", "optim.lr=1e-3"]


def test_interpolate_keeps_the_share_of_the_change_asked_for():
    start = {"w": torch.tensor([0.0, 2.0]), "b": torch.tensor([1.0])}
    trained = {"w": torch.tensor([1.0, 0.0]), "b": torch.tensor([1.0])}
    merged = interpolate(start, trained, 0.25)
    assert torch.equal(merged["w"], torch.tensor([0.25, 1.5])) and torch.equal(merged["b"], torch.tensor([1.0]))
    assert all(torch.equal(interpolate(start, trained, 1.0)[k], trained[k]) for k in trained)
    with pytest.raises(ValueError, match="same tensors"):
        interpolate(start, {"w": trained["w"]}, 0.5)


def _trainable(model):
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def test_the_last_iteration_keeps_part_of_the_change_and_a_resume_trains_on_from_the_trained_weights(tmp_path):
    from agentgym.train.checkpoint import load_state
    from agentgym.train.trainer import Trainer

    run = tmp_path / "run"
    cfg = load_config("toy_learning", [f"train.run_dir={run}", *SMALL, "train.iterations=2",
                                       "train.change_kept=0.5", "checkpoint.resume=auto"])
    trainer = Trainer(cfg)
    try:
        start = _trainable(trainer.model)
        trainer.run()
        final = _trainable(trainer.model)
    finally:
        trainer.close()
    state = load_state(run / "ckpt-2")
    trained = state["trained_weights"]
    assert any(not torch.equal(trained[n], start[n]) for n in start)  # training moved the weights
    for name in start:  # the model (and the checkpoint's model/) hold the half-way point
        assert torch.allclose(final[name], start[name] + 0.5 * (trained[name] - start[name]), atol=1e-7)
    from safetensors.torch import load_file
    saved = load_file(str(run / "ckpt-2" / "model" / "model.safetensors"))
    moved = next(n for n in start if not torch.equal(trained[n], start[n]) and n in saved)
    assert torch.allclose(saved[moved], final[moved])
    row = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()][-1]
    assert row["merge/change_kept"] == 0.5 and row["merge/weight_change_norm"] > 0
    # one more iteration: training resumes from the trained weights, not the merge
    more = load_config("toy_learning", [f"train.run_dir={run}", *SMALL, "train.iterations=3",
                                        "train.change_kept=0.5", "checkpoint.resume=auto"])
    resumed = Trainer(more)
    try:
        assert all(torch.equal(p, trained[n]) for n, p in _trainable(resumed.model).items())
        assert resumed._start_weights is not None  # the config's policy: the merge's start again
        assert all(torch.equal(resumed._start_weights[n], start[n]) for n in start)
    finally:
        resumed.close()


@pytest.mark.parametrize("override,message", [
    ({"train": {"change_kept": 0.0}}, "in (0, 1]"),
    ({"train": {"change_kept": 1.5}}, "in (0, 1]"),
    ({"train": {"change_kept": 0.5}, "model": {"lora": {"enabled": True}}}, "model.lora.enabled=false"),
    ({"train": {"change_kept": 0.5, "distributed": "ddp"}}, "train.distributed=none"),
])
def test_a_merge_the_run_cannot_honour_is_refused(override, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("]", r"\]")):
        config_from_dict(override)
    config_from_dict({"train": {"change_kept": 0.5}})
