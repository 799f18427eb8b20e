"""`BasePolicy`, the convenience base of the backends; the contract itself is in `agentgym.policy`
(re-exported here, so `from agentgym.policies.base import SamplingParams` keeps working)."""
from __future__ import annotations

import asyncio
from typing import Any, Sequence

from agentgym.policy import EnvContext, Generation, GenerationRequest, Policy, SamplingParams

__all__ = ["BasePolicy", "EnvContext", "Generation", "GenerationRequest", "Policy", "SamplingParams"]


class BasePolicy:
    """Convenience base: subclasses implement `generate`; `agenerate` and `close` come for free."""

    #: True for policies that read `prompt_ids` (and so need a tokenizer and chat template)
    uses_tokens: bool = True

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        raise NotImplementedError

    async def agenerate(self, requests: Sequence[GenerationRequest]) -> list[Generation]:
        return await asyncio.to_thread(self.generate, requests)

    def update_weights(self, state_dict: Any) -> None:
        """Load new weights after a training step (model backends override this)."""

    def close(self) -> None:
        pass
