"""`load_policy(spec)`: one string names any policy, for the CLI, eval and train configs.

Specs:
  hf[:MODEL]                   transformers (MODEL: smollm2-135m-instruct (default), a folder, a .gguf, a hub id)
  checkpoint:DIR               a training checkpoint (DIR/model in HF format, or DIR/latest -> step folder)
  openai:URL[#MODEL]           an OpenAI-compatible server; pass tokenizer=... (object or model spec);
                               several servers as URL,URL,... (least-outstanding, failover)
  vllm[:MODEL]                 the in-process vLLM engine (a GPU, or vLLM's CPU build); MODEL as for hf, or
                               checkpoint:DIR
  random | oracle              a random admissible action / the env's oracle action
  scripted:FILE_OR_MODULE:FUNC a function (EnvContext) -> str from a .py file or an importable module
  admissible:SPEC              SPEC (hf:/checkpoint:) choosing among info["admissible_actions"] by likelihood
  KIND:ARG                     a back end a plug-in registered (below)
Keyword arguments go to the backend's constructor.

The trainer's `model.policy` is a spec of the same grammar, narrowed to what it can train: `hf:MODEL`,
`checkpoint:DIR`, `tiny:NAME` (a tiny model the trainer builds), or a trainable back end's kind before one of
them (`vllm:hf:MODEL`, `vllm:MODEL` for short; `split_model_spec`): the trainer trains the HF weights and
the back end rolls out, fed the weights after each update. A checkpoint is found by one resolver
(`checkpoint_model_dir`) for both, and a back end is built by one registry for both: its `load_policy`
builder for evals, its `rollout` builder (`rollout_backend`) for training.

Plug-in back ends register like envs do: a package declares an entry point in the group
`agentgym.policies` (agentgym.policy.POLICY_ENTRY_POINT_GROUP) whose target is a function that calls
`register_backend(kind, builder)`; `load_policy` loads the group once, the first time it meets a kind
it does not know. A back end that can roll out for training also passes `rollout=` (a builder of a
`TrainablePolicy` on the trained model's folder); `model.policy: KIND:hf:MODEL` then trains with it.
In pyproject.toml:

    [project.entry-points."agentgym.policies"]
    mybackend = "my_package.policy:register"
"""
from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any, Callable

from agentgym.errors import ConfigError
from agentgym.policies.base import BasePolicy
from agentgym.policy import POLICY_ENTRY_POINT_GROUP, Policy

KINDS = ("hf", "checkpoint", "openai", "vllm", "random", "oracle", "scripted", "admissible")
MODEL_KINDS = ("hf", "checkpoint", "tiny")  # what `model.policy` (the trained model) may name


def _hf(arg: str, **kwargs: Any) -> BasePolicy:
    from agentgym.policies.hf import HFPolicy
    from agentgym.policies.models import DEFAULT_MODEL

    return HFPolicy.from_pretrained(arg or DEFAULT_MODEL, **kwargs)


def checkpoint_model_dir(arg: str) -> str:
    """The HF model folder of a checkpoint dir (DIR/model, following DIR/latest when present): the one
    checkpoint resolver of `load_policy("checkpoint:DIR")` and the trainer's `model.policy: checkpoint:DIR`."""
    path = Path(arg).expanduser()
    if (path / "latest").is_file():
        path = path / (path / "latest").read_text().strip()
    if (path / "model" / "config.json").is_file():
        return str(path / "model")
    if (path / "config.json").is_file():
        return str(path)
    raise ConfigError(f"checkpoint:{arg}: no model/config.json there; pass a training checkpoint folder "
                      f"(one holding model/ in HF save_pretrained format)")


def _checkpoint(arg: str, **kwargs: Any) -> BasePolicy:
    return _hf(checkpoint_model_dir(arg), **kwargs)


def _openai(arg: str, **kwargs: Any) -> BasePolicy:
    from agentgym.policies.openai import OpenAIPolicy

    url, _, model = arg.partition("#")
    tokenizer = kwargs.pop("tokenizer", None)
    if isinstance(tokenizer, str):  # a model spec: load its tokenizer
        from agentgym.policies.models import load_tokenizer

        tokenizer = load_tokenizer(tokenizer)
    return OpenAIPolicy(url, model or kwargs.pop("model", None), tokenizer, **kwargs)


def _vllm(arg: str, **kwargs: Any) -> BasePolicy:
    from agentgym.policies.models import DEFAULT_MODEL

    if not arg:
        return _vllm_rollout(DEFAULT_MODEL, **kwargs)
    _, kind, name = split_model_spec(f"vllm:{arg}")
    if kind == "tiny":
        raise ConfigError(f"vllm:{arg}: tiny models are built by the trainer; use hf:MODEL or checkpoint:DIR")
    return _vllm_rollout(checkpoint_model_dir(name) if kind == "checkpoint" else name, **kwargs)


def _vllm_rollout(model: str, **kwargs: Any) -> BasePolicy:
    """The vLLM engine on a model folder or name, for an eval (`vllm:MODEL`) and as the trainer's rollout engine."""
    from agentgym.policies.models import served_model_dir
    from agentgym.policies.vllm import VLLMPolicy

    return VLLMPolicy(served_model_dir(model), **kwargs)


def split_model_spec(spec: str) -> tuple[str, str, str]:
    """A trainable model's spec -> (rollout back end: "hf" or a trainable back end's kind, kind of the model,
    its name): `hf:MODEL`, `checkpoint:DIR`, `tiny:NAME`, or `BACKEND:` before one of them (`vllm:MODEL` =
    `vllm:hf:MODEL`), BACKEND a back end registered with `rollout=` (vllm, or a plug-in's)."""
    backend, _, rest = spec.partition(":")
    if backend in MODEL_KINDS:
        backend, rest = "hf", spec
    elif backend not in _ROLLOUT and backend not in KINDS:
        load_plugins()
    if backend != "hf":
        if backend not in _ROLLOUT:
            raise ConfigError(f"model.policy={spec!r}: use hf:MODEL, checkpoint:DIR, tiny:keydoor, or a trainable "
                              f"back end ({', '.join(_ROLLOUT)}) before one of them")
        if rest.split(":", 1)[0] not in MODEL_KINDS:
            rest = f"hf:{rest}"  # vllm:NAME, the short spelling of vllm:hf:NAME
    kind, _, name = rest.partition(":")
    if kind not in MODEL_KINDS or not name:
        raise ConfigError(f"model.policy={spec!r}: use hf:MODEL, checkpoint:DIR, tiny:keydoor or a trainable back "
                          f"end ({', '.join(_ROLLOUT)}) before one of them")
    return backend, kind, name


def rollout_backend(kind: str) -> Callable[..., Any]:
    """The builder `(model_dir, **engine kwargs) -> TrainablePolicy` of a trainable back end: the trainer's
    rollout engine for `model.policy: KIND:SPEC`."""
    return _ROLLOUT[kind]


def _random(arg: str, **kwargs: Any) -> BasePolicy:
    from agentgym.policies.scripted import RandomPolicy

    if arg:
        kwargs.setdefault("seed", int(arg) if arg.lstrip("-").isdigit() else _bad("random", arg, "random[:SEED]"))
    return RandomPolicy(**kwargs)


def _oracle(arg: str, **kwargs: Any) -> BasePolicy:
    from agentgym.policies.scripted import OraclePolicy

    return OraclePolicy(**kwargs)


def load_function(target: str) -> Callable[..., Any]:
    """`FILE.py:FUNC` or `package.module:FUNC` -> the function."""
    where, _, name = target.rpartition(":")
    if not where or not name:
        _bad("scripted", target, "scripted:FILE_OR_MODULE:FUNC")
    if where.endswith(".py") or Path(where).is_file():
        path = Path(where).expanduser()
        if not path.is_file():
            raise ConfigError(f"scripted:{target}: file {path} does not exist")
        spec = importlib.util.spec_from_file_location(f"agentgym_scripted_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            raise ConfigError(f"scripted:{target}: cannot import {where!r} ({exc})") from exc
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ConfigError(f"scripted:{target}: {where} has no function {name!r}")
    return fn


def _scripted(arg: str, **kwargs: Any) -> BasePolicy:
    from agentgym.policies.scripted import ScriptedPolicy

    return ScriptedPolicy(load_function(arg), **kwargs)


def _admissible(arg: str, **kwargs: Any) -> BasePolicy:
    """admissible:SPEC (SPEC an hf: or checkpoint: spec): choose among the env's admissible actions."""
    from agentgym.policies.admissible import AdmissiblePolicy

    inner = load_policy(arg, **kwargs)
    if not hasattr(inner, "model") or not hasattr(inner, "tokenizer"):
        raise ConfigError(f"admissible:{arg}: scoring needs a local model; use admissible:hf:MODEL or "
                          "admissible:checkpoint:DIR")
    return AdmissiblePolicy.from_policy(inner)


def _bad(kind: str, arg: str, form: str) -> Any:
    raise ConfigError(f"bad {kind} policy spec {kind}:{arg!r}; write it as {form}")


_BUILDERS: dict[str, Callable[..., Policy]] = {
    "hf": _hf, "checkpoint": _checkpoint, "openai": _openai, "vllm": _vllm,
    "random": _random, "oracle": _oracle, "scripted": _scripted, "admissible": _admissible,
}
_NEEDS_ARG = {"checkpoint": "checkpoint:DIR", "openai": "openai:URL[#MODEL]",
              "scripted": "scripted:FILE_OR_MODULE:FUNC",
              "admissible": "admissible:hf:MODEL or admissible:checkpoint:DIR"}


_ROLLOUT: dict[str, Callable[..., Any]] = {"vllm": _vllm_rollout}  # the back ends that can roll out for training

_PLUGINS_LOADED = False


def register_backend(kind: str, builder: Callable[..., Policy], needs_arg: str | None = None,
                     rollout: Callable[..., Any] | None = None) -> None:
    """Make `load_policy("KIND:ARG", **kwargs)` call `builder(ARG, **kwargs)`; `needs_arg` (e.g. "mine:URL")
    refuses a spec without its argument. `rollout` declares the back end trainable: `rollout(model_dir,
    tokenizer=, seed=, dtype=)` builds a `TrainablePolicy` the trainer rolls out with (`model.policy:
    KIND:hf:MODEL`) and feeds the weights after each update (`update_weights`). A plug-in calls this from its
    `agentgym.policies` entry point."""
    kind = kind.lower()
    if not kind.isidentifier() or kind in KINDS or kind in MODEL_KINDS:
        raise ValueError(f"policy back end {kind!r}: pick an identifier that is not a built-in "
                         f"({', '.join(KINDS + MODEL_KINDS)})")
    _BUILDERS[kind] = builder
    if needs_arg:
        _NEEDS_ARG[kind] = needs_arg
    if rollout is not None:
        _ROLLOUT[kind] = rollout


def load_plugins() -> None:
    """Run every `agentgym.policies` entry point once (each registers its back ends); a broken plug-in
    warns and the others still load, as env plug-ins do."""
    global _PLUGINS_LOADED
    if _PLUGINS_LOADED:
        return
    _PLUGINS_LOADED = True
    from importlib.metadata import entry_points

    for ep in entry_points(group=POLICY_ENTRY_POINT_GROUP):
        try:
            target = ep.load()
            if callable(target):
                target()
        except Exception as exc:
            import warnings

            warnings.warn(f"agentgym: could not load policy plug-in {ep.name!r} ({ep.value}): {exc}", stacklevel=2)


def load_policy(spec: str, **kwargs: Any) -> Policy:
    """Build the policy a spec string names (see the module docstring); kwargs go to its constructor."""
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"policy spec must be a non-empty string like 'hf:smollm2-135m-instruct', got {spec!r}")
    kind, _, arg = spec.strip().partition(":")
    kind = kind.lower()
    if kind not in _BUILDERS:
        load_plugins()
    if kind not in _BUILDERS:
        import difflib

        near = difflib.get_close_matches(kind, list(_BUILDERS), n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise ConfigError(f"unknown policy kind {kind!r} in {spec!r}{hint}; use one of {', '.join(_BUILDERS)}")
    if kind in _NEEDS_ARG and not arg:
        raise ConfigError(f"policy spec {spec!r} is missing its argument; write it as {_NEEDS_ARG[kind]}")
    return _BUILDERS[kind](arg, **kwargs)
