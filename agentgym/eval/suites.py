"""Which envs an evaluation runs: a named suite from the registry, a user's YAML suite, or env ids.

A YAML suite is a list of env ids, or of mappings with `id`, optional `kwargs` and `label`:

    name: my-suite            # optional
    envs:
      - agentgym/Toy-KeyDoor-v0
      - id: agentgym/Toy-KeyDoor-v0
        kwargs: {length: 8}
        label: keydoor-8      # report name; needed when one id appears twice
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from agentgym.errors import ConfigError
from agentgym.eval.records import CUSTOM_SUITE
from agentgym.registration import SuiteEntry, list_suites, spec, suite


def load_suite_file(path: str | Path) -> tuple[str, list[SuiteEntry]]:
    """Read a YAML suite file; returns (name, entries). Errors say which entry is wrong and how."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"suite file {str(path)!r} does not exist; pass a YAML file listing env ids")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"suite file {str(path)!r} is not valid YAML: {str(exc).splitlines()[0]}") from exc
    name = path.stem
    if isinstance(data, dict):
        name = str(data.get("name") or name)
        data = data.get("envs")
    if not isinstance(data, list) or not data:
        raise ConfigError(f"suite file {str(path)!r} must hold a non-empty list of envs "
                          "(a YAML list, or a mapping with an `envs:` list)")
    return name, [_entry(item, i, path) for i, item in enumerate(data)]


def _entry(item: Any, index: int, path: Path) -> SuiteEntry:
    where = f"suite file {str(path)!r}, entry {index}"
    if isinstance(item, str):
        return SuiteEntry(item)
    if not isinstance(item, dict) or not isinstance(item.get("id"), str):
        raise ConfigError(f"{where}: expected an env id or a mapping with `id:` (and optional kwargs, label)")
    unknown = set(item) - {"id", "kwargs", "label"}
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: id, kwargs, label")
    kwargs = item.get("kwargs") or {}
    if not isinstance(kwargs, dict):
        raise ConfigError(f"{where}: `kwargs` must be a mapping of constructor arguments")
    return SuiteEntry(item["id"], dict(kwargs), str(item.get("label") or ""))


def resolve_envs(suite_name: str | None = None, suite_file: str | Path | None = None,
                 env_ids: Sequence[str] = ()) -> tuple[str, list[SuiteEntry]]:
    """The (suite name, entries) to evaluate; exactly one of the three sources must be given.

    Every id is checked against the registry here, so a typo fails before any model is loaded.
    """
    given = [x for x in (suite_name, suite_file, list(env_ids) or None) if x]
    if len(given) != 1:
        raise ConfigError("say what to evaluate with exactly one of --suite NAME, --suite-file F.yaml or "
                          f"--env ID [ID ...] (known suites: {', '.join(list_suites()) or 'none'})")
    if suite_name:
        name, entries = suite_name, suite(suite_name)
    elif suite_file:
        name, entries = load_suite_file(suite_file)
    else:
        name, entries = CUSTOM_SUITE, [SuiteEntry(e) for e in env_ids]
    for entry in entries:
        spec(entry.env_id)  # raises RegistrationError with a "did you mean"
    names = [e.name for e in entries]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"suite {name!r} lists {dupes} more than once; give each a distinct `label`")
    return name, entries
