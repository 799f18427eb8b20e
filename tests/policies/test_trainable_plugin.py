"""A policy back end from a plug-in trains with one file plus an entry point: one registry (policies/registry.py)
builds a back end for evals (`load_policy`) and, when it declares `rollout=`, as the trainer's rollout engine
(`model.policy: KIND:SPEC`), fed the trained weights after each update like vLLM.

The plug-in below is installed for real: its module and a dist-info whose entry_points.txt names it in the
`agentgym.policies` group are written to a folder put on sys.path, so `importlib.metadata` finds it."""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

PLUGIN = '''
"""A rollout engine with its own copy of the weights, loaded from the trained model's folder."""
from agentgym.policies.hf import HFPolicy
from agentgym.policies.registry import register_backend


class CopyEngine(HFPolicy):
    pushes = 0

    def update_weights(self, state_dict):
        super().update_weights(state_dict)
        CopyEngine.pushes += 1


def rollout(model_dir, tokenizer=None, seed=0, dtype="float32"):
    from transformers import AutoModelForCausalLM

    return CopyEngine(AutoModelForCausalLM.from_pretrained(model_dir).eval(), tokenizer)


def evaluate(arg, **kwargs):
    from agentgym.policies.registry import load_policy

    inner = load_policy(f"hf:{arg}")
    return CopyEngine(inner.model, inner.tokenizer)


def register():
    register_backend("copyengine", evaluate, needs_arg="copyengine:MODEL", rollout=rollout)
'''


@pytest.fixture
def installed_plugin(tmp_path, monkeypatch):
    from agentgym.policies import registry

    site = tmp_path / "site"
    (site / "copyengine_plugin-0.1.dist-info").mkdir(parents=True)
    (site / "copyengine_plugin.py").write_text(textwrap.dedent(PLUGIN))
    (site / "copyengine_plugin-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: copyengine-plugin\nVersion: 0.1\n")
    (site / "copyengine_plugin-0.1.dist-info" / "entry_points.txt").write_text(
        "[agentgym.policies]\ncopyengine = copyengine_plugin:register\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setattr(registry, "_PLUGINS_LOADED", False)  # load the group afresh, this plug-in included
    monkeypatch.setattr(registry, "_BUILDERS", dict(registry._BUILDERS))
    monkeypatch.setattr(registry, "_NEEDS_ARG", dict(registry._NEEDS_ARG))
    monkeypatch.setattr(registry, "_ROLLOUT", dict(registry._ROLLOUT))
    yield
    sys.modules.pop("copyengine_plugin", None)


def test_a_back_end_without_rollout_is_refused_as_a_trained_policy(monkeypatch):
    from agentgym.errors import ConfigError
    from agentgym.policies import registry
    from agentgym.train.config import load_config

    monkeypatch.setattr(registry, "_BUILDERS", dict(registry._BUILDERS))
    registry.register_backend("evalonly", lambda arg, **kw: None)
    with pytest.raises(ConfigError, match=r"a trainable back end \(vllm\)"):
        load_config("toy_learning", ["model.policy=evalonly:tiny:keydoor"])
    assert registry.split_model_spec("vllm:smollm2-135m-instruct") == ("vllm", "hf", "smollm2-135m-instruct")
    assert registry.split_model_spec("tiny:keydoor") == ("hf", "tiny", "keydoor")


@pytest.mark.slow
def test_a_plugin_back_end_trains_with_pushed_weights(tmp_path: Path, installed_plugin):
    pytest.importorskip("transformers")
    import torch

    from agentgym.train.config import load_config
    from agentgym.train.metrics import read_metrics
    from agentgym.train.trainer import Trainer

    cfg = load_config("toy_learning", [f"train.run_dir={tmp_path / 'run'}", "model.policy=copyengine:tiny:keydoor",
                                       "train.iterations=2", "rollout.groups=2", "rollout.group_size=4",
                                       "eval.every=0", "logging.progress=false"])
    trainer = Trainer(cfg)
    try:
        engine = trainer.policy
        assert type(engine).__name__ == "CopyEngine" and engine.model is not trainer.model  # its own copy
        trainer.run()
        trained, served = trainer.model.state_dict(), engine.model.state_dict()
        assert all(torch.equal(trained[k], served[k]) for k in served)  # the pushed weights arrived
        assert type(engine).pushes == 2
    finally:
        trainer.close()
    metrics = read_metrics(tmp_path / "run")
    # the engine samples with the weights the trainer scores with: the stale_weights guard's gap is noise
    assert len(metrics) == 2 and all(m["logprob_diff"] < 1e-4 for m in metrics)
