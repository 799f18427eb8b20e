"""The policy contract: token ids in, token ids out.

A request carries the prompt token ids and sampling parameters; a generation carries the sampled
token ids, their text, the sampled tokens' log-probabilities and why generation stopped. Model
backends (hf, vllm, openai) read `prompt_ids`; non-model policies (scripted, random, oracle) read
`context`, which the rollout engine fills with the env and its latest observation and info.

The contract lives in the core so the rollout engine and eval need no wing; the backends live in
`agentgym.policies` (which re-exports these names), and `load_policy(spec)` reaches them by name.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")


@dataclass(frozen=True)
class EnvContext:
    """What a non-model policy may look at: the env itself and its latest observation and info."""

    env: Any
    observation: str
    info: dict[str, Any]


@dataclass(frozen=True)
class GenerationRequest:
    prompt_ids: tuple[int, ...]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    context: EnvContext | None = None


@dataclass(frozen=True)
class Choice:
    """What a policy that picks one of the env's actions chose among: every candidate's token ids (encoded as a
    response would be, end-of-turn token included), the one it sent (`pick`) and, for an expert's
    demonstration, the one it teaches (`label`; an expert that explores may send another). It travels on the
    Generation and the Turn, so the choice update reads it from the trajectory itself."""

    candidates: tuple[tuple[int, ...], ...]
    pick: int
    label: int | None = None       # None: the pick is the label
    scores: tuple[float, ...] | None = None  # each candidate's score as the policy ranked them (None: not kept)
    # the candidate the policy wrote itself (a filled action template, agentgym/action_templates.py): its
    # probability is the choice's times the writing's (train/updaters/choice_rows.turn_logprobs)
    written: int | None = None

    @property
    def target(self) -> int:
        return self.pick if self.label is None else self.label

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"candidates": [list(c) for c in self.candidates], "pick": self.pick,
                               "label": self.label}
        if self.scores is not None:
            out["scores"] = list(self.scores)
        if self.written is not None:
            out["written"] = self.written
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Choice":
        scores = d.get("scores")
        return cls(tuple(tuple(int(i) for i in c) for c in d["candidates"]), int(d["pick"]),
                   None if d.get("label") is None else int(d["label"]),
                   None if scores is None else tuple(float(x) for x in scores),
                   None if d.get("written") is None else int(d["written"]))


@dataclass(frozen=True)
class Generation:
    token_ids: tuple[int, ...]
    text: str
    logprobs: tuple[float, ...]
    finish_reason: str  # "stop" | "length" | "error"
    error: str | None = None
    choice: Choice | None = field(default=None, kw_only=True)  # set by policies that choose among given actions
    policy_version: int = field(default=0, kw_only=True)  # the weights' version that generated it (async training)


@runtime_checkable
class Policy(Protocol):
    """Anything with a batched `generate`; `agenerate` defaults to running it in a thread."""

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]: ...


@runtime_checkable
class TrainablePolicy(Policy, Protocol):
    """A policy the trainer trains: what `train/` may call on its rollout policy, and nothing else.

    `model` is the module it generates with: the trained module itself (the `hf` policy, nothing to
    send), or None for an engine holding its own copy (vLLM), which is handed the weights after every
    update (`update_weights`) or, with LoRA where `takes_adapters`, the saved adapter (`update_adapter`).
    `sleep` frees memory while the trainer runs (a no-op where there is nothing to free); `close` ends it."""

    model: Any
    takes_adapters: bool

    def update_weights(self, state_dict: Any) -> None: ...

    def update_adapter(self, path: str) -> None: ...

    def sleep(self, level: int = 1) -> None: ...

    def close(self) -> None: ...


POLICY_LOADER = "agentgym.policies.registry:load_policy"  # by name, like env entry points: no import of the wing
POLICY_ENTRY_POINT_GROUP = "agentgym.policies"  # plug-in back ends register here, as envs do in "agentgym.envs"


def load_policy(spec: str, **kwargs: Any) -> Policy:
    """Build the policy a spec string names (`hf:...`, `openai:URL`, `oracle`, ...; see agentgym.policies)."""
    module, _, name = POLICY_LOADER.partition(":")
    return getattr(importlib.import_module(module), name)(spec, **kwargs)
