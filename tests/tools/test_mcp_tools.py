"""`agentgym.mcp_tools` against real MCP server processes (tests/tools/mcp_servers/demo_server.py, written
with the SDK's server API), over stdio and over streamable HTTP on loopback: discovery with the schemas as
given, calls, a tool that raises, a tool that hangs past the per-call timeout, a server that dies mid-use,
and processes that do not outlive `close()`."""
from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="needs the mcp SDK: pip install 'agentgym[mcp]'")

import agentgym  # noqa: E402
from agentgym.errors import ConfigError, MissingDependencyError  # noqa: E402
from agentgym.toolcalls import ToolCall, run_tool  # noqa: E402
from agentgym.tools.mcp import MCPConnectionError, MCPServerSpec  # noqa: E402

SERVER = str(Path(__file__).parent / "mcp_servers" / "demo_server.py")
CALL_TIMEOUT_S = 1.5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_spec(transport: str) -> object:
    if transport == "stdio":
        return [sys.executable, SERVER]
    port = free_port()
    return {"command": [sys.executable, SERVER, "--http", "--port", str(port)], "url": f"http://127.0.0.1:{port}/mcp"}


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "zombie" in status.read_text())


def call(tools, name, **arguments):
    return run_tool({t.name: t for t in tools}, ToolCall(name, arguments))


@pytest.fixture(scope="module", params=["stdio", "http"])
def tools(request):
    toolset = agentgym.mcp_tools(server_spec(request.param), call_timeout_s=CALL_TIMEOUT_S)
    yield toolset
    toolset.close()


def test_discovery_lists_every_tool_with_its_schema_as_given(tools):
    assert [t.name for t in tools] == ["add", "capital", "fail", "hang", "die", "pid"]
    add = tools[0]
    # the server's own schema, untouched (pydantic's titles included), in the function-calling format
    assert add.parameters == {"type": "object", "title": "addArguments", "required": ["a", "b"],
                              "properties": {"a": {"title": "A", "type": "integer"},
                                             "b": {"title": "B", "type": "integer"}}}
    assert add.schema["function"] == {"name": "add", "description": "Add two integers.", "parameters": add.parameters}
    assert add.usage() == '<tool_call>{"name": "add", "arguments": {"a": "<integer>", "b": "<integer>"}}</tool_call>'


def test_calls_return_the_server_results(tools):
    result = call(tools, "add", a=2, b=40)
    assert result.ok and result.output == "42"
    assert call(tools, "capital", country="Peru").output == "Lima"


def test_arguments_are_checked_against_the_schema_before_the_server_is_asked(tools):
    missing = call(tools, "add", a=1)
    assert not missing.ok and "'b' is a required property" in missing.output and '"name": "add"' in missing.output
    wrong = call(tools, "add", a="one", b=2)
    assert not wrong.ok and "argument 'a'" in wrong.output and "integer" in wrong.output
    unknown = call(tools, "ad", a=1, b=2)
    assert not unknown.ok and "Did you mean 'add'" in unknown.output


def test_a_tool_that_raises_is_an_error_observation(tools):
    result = call(tools, "fail", message="the disk is full")
    assert not result.ok and "MCPToolError" in result.output and "the disk is full" in result.output
    refused = call(tools, "capital", country="Atlantis")
    assert not refused.ok and "no capital known for 'Atlantis'" in refused.output
    assert call(tools, "add", a=1, b=1).output == "2"  # the server is fine afterwards


def test_a_hanging_tool_times_out_and_the_server_keeps_serving(tools):
    start = time.perf_counter()
    result = call(tools, "hang")
    elapsed = time.perf_counter() - start
    assert not result.ok and f"within {CALL_TIMEOUT_S:g} s" in result.output
    assert CALL_TIMEOUT_S - 0.1 <= elapsed < CALL_TIMEOUT_S + 3
    assert tools.dead is None
    assert call(tools, "add", a=3, b=4).output == "7"


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_a_server_that_dies_mid_use_fails_calls_cleanly_and_close_reaps_it(transport):
    toolset = agentgym.mcp_tools(server_spec(transport), call_timeout_s=5)
    try:
        pid = int(call(toolset, "pid").output)
        assert pid_alive(pid)
        start = time.perf_counter()
        died = call(toolset, "die")
        assert not died.ok and "is gone" in died.output and time.perf_counter() - start < 5
        assert toolset.dead
        after = call(toolset, "add", a=1, b=2)
        assert not after.ok and "is gone" in after.output
    finally:
        toolset.close()
        toolset.close()  # twice is fine
    deadline = time.monotonic() + 5
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(pid)


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_close_stops_the_server_process(transport):
    toolset = agentgym.mcp_tools(server_spec(transport), include=["pid", "add"])
    assert [t.name for t in toolset] == ["add", "pid"]
    pid = int(call(toolset, "pid").output)
    toolset.close()
    deadline = time.monotonic() + 5
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(pid)
    with pytest.raises(MCPConnectionError, match="closed"):
        toolset.session.call_tool("add", {"a": 1, "b": 2})


def test_an_external_http_server_is_used_not_owned():
    port = free_port()
    import subprocess

    proc = subprocess.Popen([sys.executable, SERVER, "--http", "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/mcp"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.05)
        with agentgym.mcp_tools(url) as toolset:
            assert call(toolset, "add", a=5, b=6).output == "11"
        assert proc.poll() is None  # not ours to stop
    finally:
        proc.kill()
        proc.wait()


def test_unreachable_or_broken_servers_are_one_clear_error():
    with pytest.raises(MCPConnectionError, match="could not connect"):
        agentgym.mcp_tools(["/nonexistent/mcp-server-binary"], startup_timeout_s=10)
    start = time.perf_counter()
    with pytest.raises(MCPConnectionError):
        agentgym.mcp_tools([sys.executable, "-c", "import sys; sys.stderr.write('bad config'); sys.exit(2)"],
                           startup_timeout_s=20)
    assert time.perf_counter() - start < 15  # a server that exits is noticed, not waited out
    with pytest.raises(MCPConnectionError, match="exited with code 2"):
        agentgym.mcp_tools({"command": [sys.executable, "-c", "import sys; sys.exit(2)"],
                            "url": f"http://127.0.0.1:{free_port()}/mcp"})
    with pytest.raises(MCPConnectionError):
        agentgym.mcp_tools(f"http://127.0.0.1:{free_port()}/mcp", startup_timeout_s=5)
    with pytest.raises(ConfigError, match="it offers: add, capital"):
        agentgym.mcp_tools([sys.executable, SERVER], include=["add", "nope"])


@pytest.mark.parametrize("server,needle", [
    ("", "empty string"),
    ({"url": "ftp://x"}, "must start with http"),
    ({"comand": "x"}, "unknown MCP server key"),
    ({}, "needs a stdio `command` or"),
    (42, "got int"),
    ({"command": "x", "call_timeout_s": 0}, "must be > 0"),
    ({"command": "x", "call_timeout_s": "soon"}, "number of seconds"),
])
def test_bad_server_specs_are_config_errors(server, needle):
    with pytest.raises(ConfigError, match=needle):
        MCPServerSpec.parse(server)


def test_server_spec_forms():
    assert MCPServerSpec.parse("python -m srv --x 'a b'").command == ("python", "-m", "srv", "--x", "a b")
    assert MCPServerSpec.parse("http://h:1/mcp").transport == "http"
    assert MCPServerSpec.parse(["{python}", "s.py"]).command == (sys.executable, "s.py")
    spec = MCPServerSpec.parse({"command": "srv", "url": "http://127.0.0.1:9/mcp"}, call_timeout_s=3)
    assert spec.owns_process and spec.transport == "http" and spec.call_timeout_s == 3.0


def test_a_missing_sdk_says_which_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "mcp", None)
    with pytest.raises(MissingDependencyError, match=r"agentgym\[mcp\]"):
        agentgym.mcp_tools([sys.executable, SERVER])


OWNER = """
import sys, agentgym
from agentgym.toolcalls import ToolCall, run_tool
stdio = agentgym.mcp_tools([sys.executable, {server!r}])
http = agentgym.mcp_tools({http!r})
for tools in (stdio, http):
    print(run_tool({{t.name: t for t in tools}}, ToolCall("pid", {{}})).output, flush=True)
sys.stdin.read()  # until killed
"""


@pytest.mark.slow
def test_servers_do_not_outlive_a_killed_owner():
    import signal
    import subprocess

    code = OWNER.format(server=SERVER, http=server_spec("http"))
    owner = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(owner.stdout.readline()), int(owner.stdout.readline())]
        assert all(pid_alive(p) for p in pids)
        owner.send_signal(signal.SIGKILL)  # no close(), no atexit: only the guard can clean up
        owner.wait(10)
        deadline = time.monotonic() + 10
        while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(pid_alive(p) for p in pids)
    finally:
        owner.kill()
        owner.wait()


def test_import_agentgym_does_not_import_the_sdk():
    import subprocess

    code = ("import sys, agentgym, agentgym.envs, agentgym.tools.mcp, agentgym.rubric; agentgym.list_envs(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types', 'httpx2')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
