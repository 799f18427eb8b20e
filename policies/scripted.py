"""Non-model policies: `ScriptedPolicy(fn)`, `RandomPolicy(seed)`, `OraclePolicy()`.

They read `request.context` (the env, its latest observation and info) instead of the prompt ids, and
turn their text into token ids with a `ChatFormat` (default `ChatFormat.simple()`, which needs no
transformers), so their trajectories carry real token accounting like a model's. Log-probabilities
are 0 (a deterministic choice). Responses longer than `max_tokens` are cut there (finish "length").
A script that raises, or an env without an oracle, fails only that request (finish "error").
"""
from __future__ import annotations

import random
import string
from typing import Any, Callable, Sequence

from agentgym.policies.base import BasePolicy, EnvContext, Generation, GenerationRequest


class ScriptedPolicy(BasePolicy):
    """Acts with `fn(context) -> str`."""

    uses_tokens = False

    def __init__(self, fn: Callable[[EnvContext], str], chat: Any = None):
        if not callable(fn):
            raise TypeError(f"ScriptedPolicy needs a callable (EnvContext) -> str, got {type(fn).__name__}")
        from agentgym.chat import ChatFormat

        self.fn = fn
        self.chat = chat or ChatFormat.simple()

    def chat_format(self) -> Any:
        return self.chat

    def act(self, context: EnvContext) -> str:
        return self.fn(context)

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        return [self._one(r) for r in requests]

    def _one(self, request: GenerationRequest) -> Generation:
        if request.context is None:
            return Generation((), "", (), "error", f"{type(self).__name__} needs request.context (the env); "
                              "the rollout engine fills it in")
        try:
            text = self.act(request.context)
        except Exception as exc:  # a script bug fails this episode only
            return Generation((), "", (), "error", f"{type(self).__name__} raised {type(exc).__name__}: {exc}")
        if text is None:
            return Generation((), "", (), "error", f"{type(self).__name__} has no action for this state")
        ids = self.chat.encode(str(text))
        finish = "stop"
        if len(ids) > request.sampling.max_tokens:
            ids, finish = ids[: request.sampling.max_tokens], "length"
            text = self.chat.decode(ids)
        return Generation(tuple(ids), str(text), (0.0,) * len(ids), finish)


class RandomPolicy(ScriptedPolicy):
    """A random admissible action (`info["admissible_actions"]`), else a random short string."""

    def __init__(self, seed: int | None = None, chat: Any = None):
        super().__init__(self._pick, chat)
        self.rng = random.Random(seed)

    def _pick(self, context: EnvContext) -> str:
        actions = (context.info or {}).get("admissible_actions")
        if actions:
            return self.rng.choice(list(actions))
        return "".join(self.rng.choice(string.ascii_lowercase + " ") for _ in range(self.rng.randint(1, 12)))


class OraclePolicy(ScriptedPolicy):
    """Asks the env for a good action (`env.oracle_action()`); an env without one fails the request."""

    def __init__(self, chat: Any = None):
        super().__init__(self._ask, chat)

    @staticmethod
    def _ask(context: EnvContext) -> str | None:
        oracle = getattr(context.env, "oracle_action", None)
        if oracle is None:
            raise AttributeError(f"{type(context.env).__name__} has no oracle_action()")
        return oracle()
