"""Learners and collectors take their config sections, not the TrainConfig; sections a stage's folder reads
live outside it (train/sft_section.py, train/gateway_section.py), and still load and refuse as before."""
from __future__ import annotations

import importlib
import inspect
from types import SimpleNamespace

import pytest

from agentgym.errors import ConfigError
from agentgym.train.collectors.base import CollectorContext, PlaySections
from agentgym.train.collectors.sync import SyncCollector
from agentgym.train.config import TrainConfig, load_config
from agentgym.train.learners import build_learner
from agentgym.train.learners.base import LearnerContext, UpdateSections
from agentgym.train.updaters import UPDATERS


def learner_classes() -> list[type]:
    out = []
    for updater in UPDATERS.values():
        module, _, name = updater.learner.partition(":")
        out.append(getattr(importlib.import_module(module), name))
    return out


@pytest.mark.parametrize("cls", learner_classes(), ids=lambda c: c.__name__)
def test_a_learner_is_built_from_its_sections_not_the_config(cls):
    """Its constructor takes the context, its UpdateSections and named parts; only from_config sees the config."""
    params = inspect.signature(cls.__init__).parameters
    assert list(params)[1:3] == ["ctx", "sections"]
    assert not any("config" in name for name in params), f"{cls.__name__}.__init__ takes a config: {list(params)}"


def test_build_learner_hands_over_the_configs_own_sections():
    config = load_config("toy_learning", ["algorithm.estimator=grpo"])
    components = SimpleNamespace(policy=SimpleNamespace(), model=object())
    learner = build_learner(config, LearnerContext(components))
    assert type(learner).__name__ == "TokenPPO"
    assert learner.cfg == UpdateSections(config.algorithm, config.optim, config.train, config.rollout)
    assert learner.cfg.train is config.train and not hasattr(learner.cfg, "sft") and not hasattr(learner.cfg, "model")


def test_a_collector_reads_its_sections():
    config = load_config("toy_learning", ["rollout.seed_start=41"])
    sections = PlaySections.of(config)
    assert (sections.rollout, sections.train, sections.algorithm) == (config.rollout, config.train, config.algorithm)
    assert sections.selfplay is config.selfplay and sections.gateway is config.gateway
    ctx = CollectorContext(sections, config.rollout.env, chat=None, policy=lambda: None, reward_range=None,
                           group_rewards=None, iteration=0)
    collector = SyncCollector(ctx, {})
    assert collector.next_seed == 41 and collector.state_dict() == {"next_seed": 41}
    assert SyncCollector(ctx, {"next_seed": 77}).next_seed == 77  # a checkpoint's seed wins


def test_the_sft_section_loads_and_refuses_as_before():
    config = load_config("toy_learning", ["sft.enabled=true", "sft.episodes=5"])
    assert config.sft.enabled and config.sft.episodes == 5
    assert type(config.sft).__module__ == "agentgym.train.sft_section"
    with pytest.raises(ConfigError, match="sft.objective=choice needs sft.source=expert"):
        load_config("toy_learning", ["sft.objective=choice", "sft.source=transcripts", "sft.path=x.jsonl"])


GATEWAY = ["train.verify_tokens=false", "eval.every=0"]


def test_a_gateway_command_that_does_not_parse_is_one_config_error():
    with pytest.raises(ConfigError, match="does not parse as a command line") as err:
        load_config("toy_learning", [*GATEWAY, 'gateway.command=python3 "agent.py'])
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="names no program"):
        load_config("toy_learning", [*GATEWAY, "gateway.command=' '"])
    assert load_config("toy_learning", [*GATEWAY, "gateway.command=python3 agent.py"]).gateway.enabled


def test_a_gateway_harness_that_does_not_import_fails_at_load():
    with pytest.raises(ConfigError, match="cannot import"):
        load_config("toy_learning", [*GATEWAY, "gateway.harness=no_such_module_zz:run"])
    assert TrainConfig().gateway.enabled is False
