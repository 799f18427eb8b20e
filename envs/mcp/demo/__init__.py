"""The demo MCP server and its task config (shipped with the package so agentgym/MCP-v0 runs out of the box)."""
