"""Suites: registry names, user YAML files, env ids; bad input gets a one-line error."""
import pytest

from agentgym.errors import AgentGymError, ConfigError, RegistrationError
from agentgym.eval.suites import load_suite_file, resolve_envs


def test_named_suite_from_registry():
    name, entries = resolve_envs(suite_name="toy")
    assert name == "toy"
    assert {e.env_id for e in entries} >= {"agentgym/Toy-KeyDoor-v0", "agentgym/Toy-Calculator-v0"}


def test_env_ids_make_a_custom_suite():
    name, entries = resolve_envs(env_ids=["agentgym/Toy-KeyDoor-v0", "agentgym/Toy-Calculator-v0"])
    assert name == "custom" and [e.name for e in entries] == ["agentgym/Toy-KeyDoor-v0", "agentgym/Toy-Calculator-v0"]


def test_yaml_suite_with_kwargs_and_labels(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("name: corridors\nenvs:\n  - agentgym/Toy-KeyDoor-v0\n"
                    "  - id: agentgym/Toy-KeyDoor-v0\n    kwargs: {length: 7}\n    label: keydoor-7\n")
    name, entries = resolve_envs(suite_file=path)
    assert name == "corridors"
    assert [(e.env_id, e.kwargs, e.name) for e in entries] == [
        ("agentgym/Toy-KeyDoor-v0", {}, "agentgym/Toy-KeyDoor-v0"),
        ("agentgym/Toy-KeyDoor-v0", {"length": 7}, "keydoor-7")]


def test_plain_yaml_list_takes_its_name_from_the_file(tmp_path):
    path = tmp_path / "quick.yml"
    path.write_text("- agentgym/Toy-Calculator-v0\n")
    assert load_suite_file(path)[0] == "quick"


@pytest.mark.parametrize("text,needle", [
    ("envs: []\n", "non-empty list"),
    ("- {kwargs: {}}\n", "entry 0"),
    ("- id: agentgym/Toy-KeyDoor-v0\n  kwrags: {}\n", "unknown key"),
    ("- id: agentgym/Toy-KeyDoor-v0\n  kwargs: [1]\n", "mapping"),
    ("envs: [\n", "not valid YAML"),
])
def test_bad_yaml_suites_say_what_is_wrong(tmp_path, text, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=needle) as info:
        load_suite_file(path)
    assert "\n" not in str(info.value)


def test_bad_selection_and_unknown_ids_fail_before_anything_runs(tmp_path):
    with pytest.raises(ConfigError, match="exactly one"):
        resolve_envs()
    with pytest.raises(ConfigError, match="exactly one"):
        resolve_envs(suite_name="toy", env_ids=["agentgym/Toy-KeyDoor-v0"])
    with pytest.raises(RegistrationError, match="Did you mean"):
        resolve_envs(env_ids=["agentgym/Toy-KeyDor-v0"])
    with pytest.raises(RegistrationError, match="no suite"):
        resolve_envs(suite_name="toys")
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_envs(suite_file=tmp_path / "missing.yaml")
    with pytest.raises(AgentGymError, match="label"):
        resolve_envs(env_ids=["agentgym/Toy-KeyDoor-v0", "agentgym/Toy-KeyDoor-v0"])
