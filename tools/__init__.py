"""Tools: the tool-calling API (re-exported from `agentgym.toolcalls`) and the back ends shared by envs
(retrieval; later sandboxes, shell, editor, browser).

The API lives in the core (`agentgym/toolcalls.py`) because `import agentgym` needs it; it is
re-exported here so `from agentgym.tools import tool` reads naturally.
"""
from agentgym.toolcalls import (MAX_PARSE_CHARS, PARSERS, Tool, ToolCall, ToolResult, extract_tag, parse_hermes,
                                parse_openai_json, parse_tool_calls, run_tool, tool)

__all__ = ["MAX_PARSE_CHARS", "PARSERS", "Tool", "ToolCall", "ToolResult", "extract_tag", "parse_hermes",
           "parse_openai_json", "parse_tool_calls", "run_tool", "tool"]
