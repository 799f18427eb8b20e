"""Config tree: YAML + dotted overrides, validation with messages that say how to fix."""
from __future__ import annotations

from pathlib import Path

import pytest

from agentgym.errors import ConfigError
from agentgym.train.config import PRESET_DIR, TrainConfig, config_from_dict, load_config


def test_defaults_are_valid_and_overrides_apply():
    cfg = config_from_dict({}, ["algorithm.gamma=0.9", "rollout.group_size=4", "model.lora.enabled=true",
                                "algorithm.turn_cap_schedule=[[0, 2], [5, 4]]", "algorithm.loss.dual_clip=3"])
    assert isinstance(cfg, TrainConfig)
    assert cfg.algorithm.gamma == 0.9 and cfg.rollout.group_size == 4 and cfg.model.lora.enabled
    assert cfg.algorithm.turn_cap_schedule == ((0, 2), (5, 4)) and cfg.algorithm.loss.dual_clip == 3.0
    # YAML 1.1 reads 2e-4 (no dot) as a string; a float field takes it as the number it means
    assert config_from_dict({}, ["optim.lr=2e-4"]).optim.lr == 2e-4


def test_yaml_file(tmp_path: Path):
    p = tmp_path / "c.yaml"
    p.write_text("rollout:\n  env: agentgym/Toy-KeyDoor-v0\n  groups: 2\ntrain:\n  iterations: 3\n")
    cfg = load_config(p, ["train.iterations=5"])
    assert cfg.rollout.groups == 2 and cfg.train.iterations == 5


@pytest.mark.parametrize("overrides,match", [
    (["algorithm.gama=0.9"], "Did you mean 'algorithm.gamma'"),
    (["algoritm.gamma=0.9"], "Did you mean 'algorithm'"),
    (["algorithm.estimator=gigp"], "Did you mean 'gigpo'"),
    (["algorithm.estimator=turn_gae"], "model.critic=shared"),
    (["rollout.group_size=1"], "group_size >= 2"),
    (["algorithm.gamma=1.5"], r"gamma must be in \[0, 1\]"),
    (["train.iterations=many"], "must be an integer"),
    (["optim.lr=fast"], "optim.lr must be a number"),
    (["algorithm.loss.dual_clip=0.5"], "dual_clip must be > 1"),
    (["model.policy=vllm:Qwen/Qwen2.5-1.5B-Instruct", "rollout.action_mode=admissible"], "action_mode=generate"),
    (["gamma"], "section.key=value"),
])
def test_invalid_configs_say_how_to_fix(overrides, match):
    with pytest.raises(ConfigError, match=match):
        config_from_dict({}, overrides)


def test_missing_file_suggests_presets():
    with pytest.raises(ConfigError, match="Presets"):
        load_config("no_such_config.yaml")


@pytest.mark.parametrize("preset", sorted(p.name for p in PRESET_DIR.glob("*.yaml")))
def test_presets_load(preset):
    cfg = load_config(PRESET_DIR / preset)
    assert cfg.train.iterations >= 1


def test_presets_resolve_by_name():
    names = [p.stem for p in PRESET_DIR.glob("*.yaml")]
    assert {"quickstart_cpu", "toy_learning", "household_gpu_vllm", "search_gpu_vllm"} <= set(names)
    assert load_config("toy_learning").rollout.env.startswith("agentgym/")


def test_options_list_every_leaf_with_its_default_and_doc():
    import dataclasses
    import subprocess
    import sys

    from agentgym.train.config import TrainConfig
    from agentgym.train.options import options

    def leaves(cls, prefix=""):
        for f in (f for f in dataclasses.fields(cls) if f.init):  # init=False: derived, not an option
            value = getattr(cls(), f.name)
            yield from (leaves(type(value), f"{prefix}{f.name}.") if dataclasses.is_dataclass(value)
                        else [f"{prefix}{f.name}"])

    listed = {o.name: o for o in options()}
    assert set(listed) == set(leaves(TrainConfig))
    assert listed["algorithm.gamma"].default == 0.95 and listed["algorithm.gamma"].doc.startswith("Turn discount")
    assert "KV-cache space in GiB" in listed["model.vllm.kv_cache_gib"].doc
    assert listed["rollout.layout"].doc.startswith('"trajectory"')  # documented once, on the engine's config
    out = subprocess.run([sys.executable, "-m", "agentgym.train", "--options"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and "model.vllm.cpu_threads" in out.stdout and "choice_ppo" in out.stdout
    assert all(name in out.stdout for name in ("gigpo", "turn_gae", "bi_level_gae"))


def test_model_specs_split_into_backend_kind_and_name():
    from agentgym.policies.registry import split_model_spec

    assert split_model_spec("hf:smollm2-135m-instruct") == ("hf", "hf", "smollm2-135m-instruct")
    assert split_model_spec("vllm:tiny:keydoor") == ("vllm", "tiny", "keydoor")
    assert split_model_spec("vllm:checkpoint:runs/x") == ("vllm", "checkpoint", "runs/x")
    assert split_model_spec("vllm:Qwen/Qwen2.5-1.5B-Instruct") == ("vllm", "hf", "Qwen/Qwen2.5-1.5B-Instruct")
    with pytest.raises(ConfigError, match="use hf:MODEL"):
        split_model_spec("gguf:model")
    with pytest.raises(ConfigError, match="use hf:MODEL"):  # refused at load, not when the trainer starts
        config_from_dict({"model": {"policy": "gguf:model"}})


def test_the_vllm_policy_gets_the_engine_settings_of_the_config(tmp_path, monkeypatch):
    from agentgym.policies import models, vllm
    from agentgym.train import setup

    seen = {}
    monkeypatch.setattr(vllm, "VLLMPolicy", lambda path, **kw: seen.update(path=path, **kw) or "engine")
    monkeypatch.setattr(models, "served_model_dir", lambda name: f"/dense/{name}")
    cfg = load_config("household_cpu_vllm", [f"train.run_dir={tmp_path}", "model.vllm.kv_cache_gib=0.5"])
    assert setup.make_policy(cfg, model=None, tokenizer="tok") == "engine"
    assert seen["path"] == "/dense/smollm2-135m-instruct" and seen["tokenizer"] == "tok"
    assert seen["kv_cache_gib"] == 0.5 and seen["cpu_threads"] == 2 and seen["logprobs_mode"] == "processed_logprobs"
    assert seen["max_model_len"] == cfg.rollout.max_context_tokens + cfg.rollout.max_new_tokens
    assert "skip_tokenizer_init" not in seen and "enable_lora" not in seen
    # LoRA: the engine serves the adapter (LoRA layers) unless lora_push=merged, which pushes merged weights
    lora = ["model.lora.enabled=true", "model.train_layers=0"]
    for push, enabled in (("adapter", True), ("merged", False)):
        seen.clear()
        setup.make_policy(load_config("household_cpu_vllm", [f"train.run_dir={tmp_path}", *lora,
                                                             f"model.vllm.lora_push={push}"]), None, "tok")
        assert bool(seen.get("enable_lora")) is enabled, push


def test_the_prefix_cache_size_reaches_the_hf_policy_and_is_refused_elsewhere(tmp_path, monkeypatch):
    from agentgym.policies import admissible, hf
    from agentgym.train import setup

    seen = []
    monkeypatch.setattr(hf, "HFPolicy", lambda model, tok, **kw: seen.append(("free", kw)) or "free")
    monkeypatch.setattr(admissible, "AdmissiblePolicy", lambda model, tok, **kw: seen.append(("choose", kw)) or "choose")
    for preset, kind in (("search_cpu", "free"), ("quickstart_cpu", "choose")):  # generating, choosing
        for size, passed in ((None, {}), (256, {"prefix_cache_mb": 256.0}), (0, {"prefix_cache_mb": 0.0})):
            seen.clear()
            extra = [] if size is None else [f"model.prefix_cache_mb={size}"]
            cfg = load_config(preset, [f"train.run_dir={tmp_path}", *extra])
            assert setup.make_policy(cfg, model=None, tokenizer="tok") == kind
            assert seen == [(kind, passed)], (preset, size)  # None leaves each policy its own default
    with pytest.raises(ConfigError, match="must be >= 0"):
        load_config("quickstart_cpu", ["model.prefix_cache_mb=-1"])
    with pytest.raises(ConfigError, match="drop model.prefix_cache_mb"):  # a vLLM engine keeps its own cache
        load_config("household_cpu_vllm", ["model.prefix_cache_mb=256"])


def test_lora_push_is_refused_where_it_means_nothing():
    with pytest.raises(ConfigError, match="lora_push=merged chooses how a vllm: policy"):
        load_config("household_cpu_vllm", ["model.vllm.lora_push=merged"])  # no LoRA: full weights are pushed
    with pytest.raises(ConfigError, match="lora_push=merged chooses how a vllm: policy"):
        load_config("web_shop_text_cpu", ["model.vllm.lora_push=merged"])  # LoRA, but HF generation: nothing is pushed
    with pytest.raises(ConfigError, match="must be adapter or merged"):
        load_config("web_shop_text_cpu", ["model.vllm.lora_push=both"])


def test_one_rollout_config_with_one_set_of_defaults():
    """The train config's rollout section is the engine's RolloutConfig plus training's fields; eval's
    defaults are the same; the engine config a section hands the rollout keeps every engine field."""
    import dataclasses

    from agentgym.eval.records import EvalConfig
    from agentgym.registration import SuiteEntry
    from agentgym.engine.rollout import RolloutConfig
    from agentgym.train.config import RolloutSection

    engine, section = RolloutConfig(), RolloutSection()
    assert isinstance(section, RolloutConfig)
    shared = [f.name for f in dataclasses.fields(RolloutConfig) if f.name != "sampling"]
    assert all(getattr(section, n) == getattr(engine, n) for n in shared)
    assert section.max_new_tokens == engine.sampling.max_tokens == 256
    ev = EvalConfig(policy="random", entries=(SuiteEntry("agentgym/Toy-KeyDoor-v0"),), out_dir="o")
    # eval leaves the context to each env's registration (agentgym.horizon), then to the engine's defaults
    assert (ev.layout, ev.history_turns, ev.max_context_tokens, ev.max_observation_tokens) == (None,) * 4
    unregistered = ev.context_settings("unregistered/Env-v0")
    assert (unregistered["layout"], unregistered["history_turns"], unregistered["max_context_tokens"],
            unregistered["max_observation_tokens"], ev.max_tokens) == \
        (engine.layout, engine.history_turns, engine.max_context_tokens, engine.max_observation_tokens, 256)
    custom = config_from_dict({"rollout": {"layout": "step", "history_turns": 3, "env_timeout_s": 5,
                                           "max_new_tokens": 7, "temperature": 0.5}}).rollout
    built = custom.engine_config(temperature=0.0, stop=("</s>",), seed=3, max_turns=4)
    assert type(built) is RolloutConfig and built.max_turns == 4 and built.env_timeout_s == 5
    assert all(getattr(built, n) == getattr(custom, n) for n in shared if n != "max_turns")
    assert built.sampling == dataclasses.replace(engine.sampling, temperature=0.0, max_tokens=7, stop=("</s>",), seed=3)
    with pytest.raises(ConfigError, match="unknown config key 'rollout.sampling'"):
        config_from_dict({"rollout": {"sampling": {"temperature": 0.5}}})


def test_a_bare_off_switches_a_guard_off():
    """YAML 1.1 reads `off` as false: `train.guardrails.no_signal=off` still means the guard's "off"."""
    cfg = load_config("toy_learning", ["train.guardrails.no_signal=off", "train.guardrails.collapse='off'"])
    assert cfg.train.guardrails.no_signal == "off" and cfg.train.guardrails.collapse == "off"
    with pytest.raises(ConfigError, match="must be one of"):
        load_config("toy_learning", ["train.guardrails.no_signal=true"])


@pytest.mark.parametrize("option", ["train.max_staleness=2", "train.staleness=correct", "train.batch_order=start",
                                    "train.rollout_workers=3", "train.groups_per_rollout=1"])
def test_async_only_options_in_sync_mode_are_refused_with_the_fix(option):
    """Issue 51, defect 5: the sync loop would ignore them silently."""
    name = option.split("=")[0]
    with pytest.raises(ConfigError) as err:
        load_config("toy_learning", [option])
    message = str(err.value)
    assert message.startswith(f"{option} only applies to train.mode=async") and "\n" not in message
    assert f"set train.mode=async, or drop {name}" in message
    load_config("toy_learning", [option, "train.mode=async", "algorithm.loss.tis_cap=2.0"])  # where it applies
