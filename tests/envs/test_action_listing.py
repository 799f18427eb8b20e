"""rollout.action_mode=admissible is refused, with the fix, for an env that cannot list the actions it accepts
(an env listing templates passes: the policy writes their slots, tests/policies/test_action_templates.py)."""
from __future__ import annotations

import pytest

from agentgym.action_listing import action_listing, check_action_mode
from agentgym.errors import ConfigError


def test_envs_declare_what_they_list():
    assert action_listing("agentgym/Search-1Hop-v0") == "none"
    assert action_listing("agentgym/WebShop-v0") == "partial"
    assert action_listing("agentgym/TextWorld-v0") == "all"
    assert action_listing("agentgym/ScienceWorld-find-plant-v0") == "all"
    assert action_listing("agentgym/ScienceWorld-find-plant-v0", {"valid_actions": False}) == "none"
    assert action_listing("agentgym/Toy-KeyDoor-v0") is None  # undeclared: not refused, a run tells
    assert action_listing("agentgym/No-Such-v0") is None      # unknown: making it says so, with the closest ids


@pytest.mark.parametrize("env_id, kwargs", [("agentgym/Search-v0", None),
                                            ("agentgym/ScienceWorld-boil-v0", {"valid_actions": False})])
def test_admissible_mode_is_refused_with_the_fix(env_id, kwargs):
    with pytest.raises(ConfigError, match="set rollout.action_mode=generate") as err:
        check_action_mode(env_id, "admissible", kwargs)
    assert env_id in str(err.value) and "\n" not in str(err.value)
    check_action_mode(env_id, "generate", kwargs)  # free text is fine


def test_envs_that_list_everything_or_templates_pass():
    check_action_mode("agentgym/TextWorld-v0", "admissible")
    check_action_mode("agentgym/WebShop-v0", "admissible")  # the policy writes search[<query>]'s slot
    check_action_mode("agentgym/ScienceWorld-find-living-thing-v0", "admissible", {"simplifications": "easy"})


def test_what_the_shop_lists_is_not_all_playable():
    """The declaration is true of the env: the shop's first page lists only the search template, which
    the shop refuses as written; TextWorld plays every command it lists."""
    import agentgym

    env = agentgym.make("agentgym/WebShop-v0", num_products=100)
    _, info = env.reset(seed=0)
    assert info["admissible_actions"] == ["search[<query>]"]
    _, _, _, _, info = env.step(info["admissible_actions"][0])
    assert not info["valid_action"]


def test_the_config_loader_refuses_admissible_mode_on_a_free_text_env():
    """The check runs where a run starts: loading the config, before any model loads."""
    from agentgym.train.config import load_config

    with pytest.raises(ConfigError, match="agentgym/Search-1Hop-v0 takes free text.*action_mode=generate"):
        load_config("search_cpu", ["rollout.action_mode=admissible"])
    assert load_config("textworld_cpu").rollout.action_mode == "admissible"  # a listing env loads as before
