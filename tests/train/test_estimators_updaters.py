"""The estimator registry and the update seam: one place to add an estimator, one place that says what
each updater cannot do (refused at config load, one line, the option and the fix)."""
from __future__ import annotations

import numpy as np
import pytest

from agentgym.errors import ConfigError
from agentgym.train import estimators as E
from agentgym.train.config import config_from_dict
from agentgym.train.updaters import updater_for

ADMISSIBLE = {"rollout": {"action_mode": "admissible"}}


@pytest.fixture
def mean_baseline():
    """An estimator registered in one call: the episode return minus the mean of its group."""
    def advantages(cfg, table, trajectories, penalty):
        returns = np.zeros(len(table))
        for traj in np.unique(table.traj):
            rows = table.traj == traj
            returns[rows] = table.reward[rows].sum()
        means = {g: returns[table.group == g].mean() for g in np.unique(table.group)}
        return returns - np.array([means[g] for g in table.group])

    E.register_estimator("mean_baseline", turn_advantages=advantages, needs_groups=True,
                         doc="episode return minus the group mean")
    yield "mean_baseline"
    E._REGISTRY.pop("mean_baseline")


def test_a_new_estimator_is_accepted_by_the_config_and_runs(mean_baseline, tmp_path):
    pytest.importorskip("transformers")
    from agentgym.train.config import load_config
    from agentgym.train.metrics import read_metrics
    from agentgym.train.trainer import train

    with pytest.raises(ConfigError, match="compares rollouts|group_size"):
        config_from_dict({"algorithm": {"estimator": mean_baseline}, "rollout": {"group_size": 1}})
    run = train(load_config("toy_learning", [f"train.run_dir={tmp_path}", f"algorithm.estimator={mean_baseline}",
                                             "train.iterations=2", "eval.every=0", "rollout.groups=2"]))
    metrics = read_metrics(run)
    assert len(metrics) == 2 and all(np.isfinite(m["policy_loss"]) for m in metrics)


def test_an_unknown_estimator_says_did_you_mean():
    with pytest.raises(ConfigError, match="Did you mean 'gigpo'"):
        config_from_dict({"algorithm": {"estimator": "gigp"}})


def test_registration_needs_exactly_one_builder():
    with pytest.raises(ValueError, match="exactly one"):
        E.register_estimator("x", doc="none given")
    with pytest.raises(ValueError, match="needs_critic"):
        E.register_estimator("x", doc="targets read a critic", targets=lambda *a: None)


@pytest.mark.parametrize("override,option", [
    ({"algorithm": {"igpo": {"coef": 0.5}}}, "algorithm.igpo.coef"),
    ({"algorithm": {"regularisers": {"epo_coef": 0.1}}}, "algorithm.regularisers.epo_coef"),
    ({"algorithm": {"loss": {"tis_cap": 2.0}}}, "algorithm.loss.tis_cap"),
    ({"algorithm": {"shaping": {"overlong": "mask"}}}, "algorithm.shaping.overlong"),
    ({"algorithm": {"loss": {"dual_clip": 3.0}}}, "algorithm.loss.dual_clip"),
    ({"algorithm": {"loss": {"ratio_level": "sequence"}}}, "algorithm.loss.ratio_level"),
    ({"algorithm": {"loss": {"agg": "seq-mean-token-sum"}}}, "algorithm.loss.agg"),
    ({"algorithm": {"gae": {"whiten_advantages": True}}}, "algorithm.gae.whiten_advantages"),
    ({"algorithm": {"estimator": "turn_gae"}, "model": {"critic": "shared"}}, "algorithm.estimator"),
    ({"algorithm": {"estimator": "turn_gae"}}, "algorithm.estimator"),
    ({"model": {"critic": "shared"}}, "model.critic"),
])
def test_the_choice_updater_refuses_what_it_cannot_do(override, option):
    config = {**ADMISSIBLE, **override}
    with pytest.raises(ConfigError) as error:
        config_from_dict(config)
    message = str(error.value)
    assert message.startswith(f"{option} is not supported by the choice_ppo updater") and "\n" not in message
    assert "rollout.action_mode=generate" in message  # the fix


def test_vllm_rollouts_with_admissible_mode_are_refused():
    with pytest.raises(ConfigError, match="action_mode=admissible scores"):
        config_from_dict({**ADMISSIBLE, "model": {"policy": "vllm:hf:smollm2-135m-instruct"}})


def test_the_exact_kl_is_the_choice_updaters_and_the_token_actors_refuse_it():
    for estimator in ("exact", "k1", "k3"):  # a turn's whole choice distribution is at hand: any estimate works
        config_from_dict({**ADMISSIBLE, "algorithm": {"regularisers": {"kl_coef": 0.1, "kl_estimator": estimator}}})
    exact = {"regularisers": {"kl_coef": 0.1, "kl_estimator": "exact"}}
    for algorithm, updater in (({}, "token_ppo"), ({"estimator": "archer"}, "archer")):
        with pytest.raises(ConfigError) as error:
            config_from_dict({"algorithm": {**exact, **algorithm}})
        message = str(error.value)
        assert message.startswith(f"algorithm.regularisers.kl_estimator is not supported by the {updater} updater")
        assert "kl_estimator=k1 or k3" in message and "\n" not in message
    config_from_dict({"algorithm": {"regularisers": {"kl_coef": 0.0, "kl_estimator": "exact"}}})  # no KL term: inert


def test_each_mode_gets_its_updater_and_token_ppo_takes_every_option():
    assert updater_for(config_from_dict(ADMISSIBLE)).name == "choice_ppo"
    token = config_from_dict({"algorithm": {"regularisers": {"kl_coef": 0.1, "epo_coef": 0.1},
                                            "loss": {"tis_cap": 2.0}, "shaping": {"overlong": "mask"}}})
    assert updater_for(token).name == "token_ppo"


@pytest.mark.parametrize("old,new", [("clip_low", "loss.clip_low"), ("loss_agg", "loss.agg"),
                                     ("kl_coef", "regularisers.kl_coef"), ("step_weight", "gigpo.step_weight"),
                                     ("hgpo_levels", "hgpo.levels"), ("lam", "gae.lam"), ("igpo_coef", "igpo.coef"),
                                     ("invalid_penalty", "shaping.invalid_penalty"), ("value_clip", "value.clip")])
def test_the_old_flat_algorithm_keys_are_refused_with_the_new_spelling(old, new):
    for attempt in (lambda: config_from_dict({"algorithm": {old: 0.1}}),
                    lambda: config_from_dict({}, [f"algorithm.{old}=0.1"])):
        with pytest.raises(ConfigError) as error:
            attempt()
        assert str(error.value) == f"algorithm.{old} moved: write algorithm.{new}"


def test_every_old_flat_key_has_a_home_that_exists():
    from agentgym.train.algorithm import MOVED_ALGORITHM_KEYS
    from agentgym.train.options import options

    names = {o.name for o in options()}
    assert all(f"algorithm.{new}" in names for new in MOVED_ALGORITHM_KEYS.values())


def test_the_readme_names_every_built_in_estimator_and_preset():
    from pathlib import Path

    from agentgym.train.config import PRESET_DIR

    root = Path(__file__).resolve().parents[2]
    # the README's Train section moved to the docs site (docs/guide/training.md); any page may name a new one
    text = "\n".join(p.read_text() for p in [root / "README.md", *sorted((root / "docs").rglob("*.md"))])
    missing = [f"`{n}`" for n in E.estimators() if f"`{n}`" not in text]
    missing += [f"`{p.stem}`" for p in PRESET_DIR.glob("*.yaml") if f"`{p.stem}`" not in text]
    assert not missing, f"neither README.md nor docs/ names {', '.join(missing)}"
