"""The demo MCP server behind `agentgym/MCP-v0`'s default tasks: a small table of country facts.

Run by the env over stdio (`python facts_server.py`), or over HTTP with `--http --port N`.
Written with the `mcp` SDK's server API, as a user's own server would be.
"""
from __future__ import annotations

import argparse

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

FACTS = {  # country: (capital, population in millions, rounded)
    "France": ("Paris", 68), "Japan": ("Tokyo", 124), "Peru": ("Lima", 34), "Kenya": ("Nairobi", 55),
    "Canada": ("Ottawa", 40), "Norway": ("Oslo", 6), "Chile": ("Santiago", 20), "Egypt": ("Cairo", 113),
}

server = MCPServer("agentgym-facts", log_level="CRITICAL")


def _row(country: str) -> tuple[str, int]:
    key = country.strip().title()
    if key not in FACTS:
        raise ToolError(f"unknown country {country!r}; known: {', '.join(sorted(FACTS))}")
    return FACTS[key]


@server.tool()
def capital(country: str) -> str:
    """The capital city of a country."""
    return _row(country)[0]


@server.tool()
def population(country: str) -> int:
    """The population of a country in millions (rounded)."""
    return _row(country)[1]


@server.tool()
def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.port)
    else:
        server.run()
