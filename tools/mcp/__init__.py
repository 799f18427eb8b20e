"""MCP (Model Context Protocol) servers as tool back ends: `mcp_tools(server)` lists a server's tools and
wraps them as agentgym `Tool`s. Needs the `mcp` SDK: pip install 'agentgym[mcp]' (imported on connect)."""
from agentgym.tools.mcp.server_spec import MCPServerSpec
from agentgym.tools.mcp.session import MCPCallOutcome, MCPConnectionError, MCPSession
from agentgym.tools.mcp.tools import MCPTool, MCPToolError, MCPToolset, mcp_tools

__all__ = ["MCPCallOutcome", "MCPConnectionError", "MCPServerSpec", "MCPSession", "MCPTool", "MCPToolError",
           "MCPToolset", "mcp_tools"]
