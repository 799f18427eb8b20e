"""A real MCP server for the tests, written with the SDK's server API (`MCPServer`).

    python demo_server.py                      # stdio
    python demo_server.py --http --port 8765   # streamable HTTP on 127.0.0.1:8765/mcp

Tools: add, capital (a tiny fact table the MCP env's tasks ask about), fail (always raises),
hang (sleeps far past any timeout), die (the process exits at once, mid-call).
"""
from __future__ import annotations

import argparse
import os
import time

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

CAPITALS = {"France": "Paris", "Japan": "Tokyo", "Peru": "Lima", "Kenya": "Nairobi"}

server = MCPServer("agentgym-demo", log_level="CRITICAL")  # quiet: tracebacks on stderr are slow


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def capital(country: str) -> str:
    """The capital city of a country."""
    if country not in CAPITALS:
        raise ToolError(f"no capital known for {country!r}; known: {', '.join(CAPITALS)}")
    return CAPITALS[country]


@server.tool()
def fail(message: str = "boom") -> str:
    """Always raises (for tests)."""
    raise ToolError(message)


@server.tool()
def hang(seconds: float = 3600.0) -> str:
    """Sleeps far longer than any timeout (for tests)."""
    time.sleep(seconds)
    return "woke up"


@server.tool()
def die() -> str:
    """Kills the server process at once (for tests)."""
    os._exit(3)


@server.tool()
def pid() -> int:
    """The server's process id (for tests)."""
    return os.getpid()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.port)
    else:
        server.run()
