"""Loading a config tree of frozen dataclasses from YAML: type checks and coercion against the annotations,
"did you mean" for unknown keys, dotted `key=value` overrides, presets by name, and the tree back as a dict.

Generic over the dataclasses it is given (train/config.py's TrainConfig, SFT's section): it imports none of
them, so the config modules import it and not the other way round.
"""
from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from pathlib import Path
from typing import Any, Literal

from agentgym.errors import ConfigError

PRESET_DIR = Path(__file__).parent / "configs"


def options_dict(section: Any) -> dict[str, Any]:
    """A dataclass tree's options as a nested dict of plain values (init fields only: derived ones left out)."""
    return {f.name: options_dict(v) if dataclasses.is_dataclass(v := getattr(section, f.name)) else _plain_copy(v)
            for f in dataclasses.fields(section) if f.init}

def _plain_copy(value: Any, as_lists: bool = False) -> Any:
    if isinstance(value, dict):
        return {k: _plain_copy(v, as_lists) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return (list if as_lists else type(value))(_plain_copy(v, as_lists) for v in value)
    return value


def plain_values(value: Any) -> Any:
    """`options_dict`'s output with tuples as lists: what yaml.safe_dump writes (and load_config reads back)."""
    return _plain_copy(value, as_lists=True)


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _coerce(value: Any, tp: Any, where: str) -> Any:
    """Check/convert a YAML value to the annotated type; raise ConfigError saying what was expected."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{where} must be a mapping of {tp.__name__} fields, got {value!r}")
        return build(tp, value, where)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, arg, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if errors else f"{where}: bad value {value!r}")
    if origin is Literal:
        if value is False and "off" in args:  # YAML 1.1 reads a bare off (and no) as false
            return "off"
        if value not in args:
            close = difflib.get_close_matches(str(value), [str(a) for a in args], n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{where} must be one of {', '.join(map(str, args))}; got {value!r}.{hint}")
        return value
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where} must be a list, got {value!r}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(v, args[0], f"{where}[{i}]") for i, v in enumerate(value))
        if len(value) != len(args):
            raise ConfigError(f"{where} must be a list of {len(args)} values, got {value!r}")
        return tuple(_coerce(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where} must be a mapping, got {value!r}")
        return dict(value)
    if tp is Any:
        return value
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str):  # YAML 1.1 reads "2e-4" (no dot) as a string
        try:
            return float(value)
        except ValueError:
            raise ConfigError(f"{where} must be a number, got {value!r}") from None
    if tp is bool and not isinstance(value, bool):
        raise ConfigError(f"{where} must be true or false, got {value!r}")
    if tp is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ConfigError(f"{where} must be an integer, got {value!r}")
    if tp is str and not isinstance(value, str):
        return str(value)
    if isinstance(tp, type) and not isinstance(value, tp):
        raise ConfigError(f"{where} must be {tp.__name__}, got {value!r}")
    return value


def build(cls: type, data: dict[str, Any], where: str = "") -> Any:
    hints = _hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    kwargs = {}
    moved = getattr(cls, "MOVED", {})
    for key, value in data.items():
        path = f"{where}.{key}" if where else key
        if key in moved:
            raise ConfigError(f"{path} moved: write {where}.{moved[key]}")
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            hint = f" Did you mean {(where + '.' if where else '') + close[0]!r}?" if close else ""
            raise ConfigError(f"unknown config key {path!r}.{hint} Known keys: {', '.join(names)}")
        kwargs[key] = _coerce(value, hints[key], path)
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where or 'config'}: {exc}") from exc


def _set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = data
    for k in keys[:-1]:
        node = node.setdefault(k, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {dotted!r}: {k!r} is not a section")
    node[keys[-1]] = value


def parse_override(text: str) -> tuple[str, Any]:
    """'algorithm.gamma=0.9' -> ('algorithm.gamma', 0.9); the value is parsed as YAML."""
    import yaml

    if "=" not in text:
        raise ConfigError(f"override {text!r} must look like section.key=value (e.g. algorithm.gamma=0.9)")
    key, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


def _deep_copy(d: Any) -> Any:
    return {k: _deep_copy(v) for k, v in d.items()} if isinstance(d, dict) else d


def read_yaml(path: str | Path) -> dict[str, Any]:
    """The mapping in a YAML file, or in the preset of that name (train/configs/)."""
    import yaml

    p = resolve_preset(path)
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML ({exc})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: the top level must be a mapping of sections (model:, rollout:, ...)")
    return data


def with_overrides(data: dict[str, Any], overrides: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """A copy of `data` with dotted `key=value` overrides applied."""
    data = _deep_copy(data or {})
    for text in overrides:
        _set_dotted(data, *parse_override(text))
    return data


def resolve_preset(path: str | Path) -> Path:
    """A YAML path, or the name of a preset in train/configs/ (with or without .yaml)."""
    p = Path(path)
    if p.exists():
        return p
    for candidate in (PRESET_DIR / p.name, PRESET_DIR / f"{p.name}.yaml"):
        if candidate.exists():
            return candidate
    presets = sorted(q.stem for q in PRESET_DIR.glob("*.yaml"))
    close = difflib.get_close_matches(p.stem, presets, n=1)
    hint = f" Did you mean preset {close[0]!r}?" if close else ""
    raise ConfigError(f"config file {str(path)!r} not found.{hint} Presets: {', '.join(presets)}")
