"""Policies: `hf`, `vllm`, `openai`, `scripted`, `random`, `oracle` backends behind one protocol.

`load_policy("hf:smollm2-135m-instruct")` and friends build any of them from one spec string; the
backends themselves import their heavy dependencies only when built. A plug-in package adds a back end
through the `agentgym.policies` entry-point group (`register_backend`; see policies/registry.py).
"""
from agentgym.policies.base import (BasePolicy, EnvContext, Generation, GenerationRequest, Policy,
                                    SamplingParams)
from agentgym.policies.registry import load_policy, register_backend

__all__ = ["BasePolicy", "EnvContext", "Generation", "GenerationRequest", "Policy", "SamplingParams",
           "load_policy", "register_backend"]
