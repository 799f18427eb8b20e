"""`BasePolicy`, the convenience base of the backends; the contract itself is in `agentgym.policy`
(re-exported here, so `from agentgym.policies.base import SamplingParams` keeps working)."""
from __future__ import annotations

import asyncio
from typing import Any, Sequence

from agentgym.errors import PolicyError
from agentgym.policy import EnvContext, Generation, GenerationRequest, Policy, SamplingParams, TrainablePolicy

__all__ = ["BasePolicy", "EnvContext", "Generation", "GenerationRequest", "Policy", "SamplingParams",
           "TrainablePolicy"]


class BasePolicy:
    """Convenience base: subclasses implement `generate`; `agenerate` and `close` come for free."""

    #: True for policies that read `prompt_ids` (and so need a tokenizer and chat template)
    uses_tokens: bool = True
    #: the module it generates with (the trained one for `hf`); None for engines with their own copy
    model: Any = None
    #: whether `update_adapter` works (vLLM's LoRARequest); otherwise LoRA runs send merged weights
    takes_adapters: bool = False

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        raise NotImplementedError

    async def agenerate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        return await asyncio.to_thread(self.generate, requests)

    def update_weights(self, state_dict: Any) -> None:
        """Load new weights after a training step (model backends override this)."""

    def update_adapter(self, path: str) -> None:
        raise PolicyError(f"{type(self).__name__} takes no LoRA adapter: send merged weights with update_weights")

    def sleep(self, level: int = 1) -> None:
        """Free memory while the trainer runs (engines with a sleep mode override this)."""

    def close(self) -> None:
        pass
