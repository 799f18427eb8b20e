"""Policies: `hf`, `vllm`, `openai`, `scripted`, `random`, `oracle` backends behind one protocol."""
from agentgym.policies.base import (BasePolicy, EnvContext, Generation, GenerationRequest, Policy,
                                    SamplingParams)

__all__ = ["BasePolicy", "EnvContext", "Generation", "GenerationRequest", "Policy", "SamplingParams"]
