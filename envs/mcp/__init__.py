"""MCP family: `agentgym/MCP-v0`, a generic env over any MCP server (its default config is a demo facts
server), and `agentgym/Rubric-v0`, which puts a rubric (weighted reward functions, LLM judges) on any env."""
from pathlib import Path

from agentgym.horizon import ContextDefaults
from agentgym.registration import register

DEMO_CONFIG = Path(__file__).parent / "demo" / "facts.yaml"


def register_envs() -> None:
    register("agentgym/MCP-v0", "agentgym.envs.mcp.env:MCPEnv", max_turns=8, suites=("mcp",),
             context=ContextDefaults(layout="trajectory", max_context_tokens=8192, max_observation_tokens=2048))
    register("agentgym/Rubric-v0", "agentgym.rubric:make_rubric_env")
