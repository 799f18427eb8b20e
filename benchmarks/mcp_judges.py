"""What MCP tools and LLM judges cost, side by side in one run.

1. One `add` tool call through `run_tool`: a local Python tool vs the same tool on an MCP server over stdio
   and over streamable HTTP (the server is envs/mcp/demo/facts_server.py). Also: connect + list time.
2. `agentgym/MCP-v0` env steps/s (one tool call per step) vs the in-process calculator toy.
3. Judge client throughput against a loopback OpenAI-compatible server that answers after a fixed latency:
   max_concurrency 1 vs 8 on distinct judgements, and cache hits.

    python benchmarks/mcp_judges.py [--calls 200]
"""
from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import agentgym
from agentgym.envs.mcp import DEMO_CONFIG
from agentgym.rubric import Episode, Step
from agentgym.toolcalls import ToolCall, run_tool, tool
from agentgym.tools.judges import JudgeClient, LLMJudge

FACTS = str(DEMO_CONFIG.parent / "facts_server.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def time_calls(tools: list, calls: int) -> tuple[float, float]:
    by_name = {t.name: t for t in tools}
    times = []
    for i in range(calls):
        start = time.perf_counter()
        result = run_tool(by_name, ToolCall("add", {"a": i, "b": 1}))
        times.append(time.perf_counter() - start)
        assert result.ok, result.output
    return statistics.median(times) * 1e3, sorted(times)[int(0.95 * len(times)) - 1] * 1e3


def tool_calls(calls: int) -> None:
    @tool
    def add(a: float, b: float) -> float:
        """Add two numbers."""
        return a + b

    rows = [("local Python tool", *time_calls([add], calls), 0.0)]
    port = free_port()
    for label, server in (("MCP stdio", [sys.executable, FACTS]),
                          ("MCP streamable HTTP", {"command": [sys.executable, FACTS, "--http", "--port", str(port)],
                                                   "url": f"http://127.0.0.1:{port}/mcp"})):
        start = time.perf_counter()
        toolset = agentgym.mcp_tools(server)
        connect = time.perf_counter() - start
        try:
            rows.append((label, *time_calls(list(toolset), calls), connect))
        finally:
            toolset.close()
    print(f"\n## one `add` call through run_tool ({calls} calls each)\n")
    print("| tool | median ms | p95 ms | start + connect + list s | median vs local |")
    print("|---|---|---|---|---|")
    for label, median, p95, connect in rows:
        print(f"| {label} | {median:.3f} | {p95:.3f} | {connect:.2f} | {median / rows[0][1]:.0f}x |")


def env_steps(steps: int) -> None:
    rows = []
    for env_id, action in (("agentgym/Toy-Calculator-v0",
                            '<tool_call>{"name": "calculate", "arguments": {"expression": "2 + 3"}}</tool_call>'),
                           ("agentgym/MCP-v0",
                            '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call>')):
        env = agentgym.make(env_id, max_turns=10_000)
        try:
            env.reset(seed=0)
            start = time.perf_counter()
            for _ in range(steps):
                env.step(action)
            rows.append((env_id, steps / (time.perf_counter() - start)))
        finally:
            env.close()
    print(f"\n## env steps with one tool call each ({steps} steps)\n")
    print("| env | steps/s |")
    print("|---|---|")
    for env_id, rate in rows:
        print(f"| {env_id} | {rate:,.0f} |")


class SlowJudge(BaseHTTPRequestHandler):
    latency_s = 0.05

    def log_message(self, *args):
        pass

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        time.sleep(self.latency_s)
        data = json.dumps({"choices": [{"message": {"content": "Score: 7"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def judge_throughput(n: int) -> None:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), SlowJudge)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"openai:http://127.0.0.1:{httpd.server_address[1]}"
    episodes = [Episode(f"task {i}", "", (Step(f"<answer>{i}</answer>", "ok", 0.0, {}),)) for i in range(n)]
    rows = []
    try:
        for concurrency in (1, 8):
            JudgeClient._shared.clear()
            judge = LLMJudge(url, model_name="m", max_concurrency=concurrency)
            with ThreadPoolExecutor(16) as pool:
                start = time.perf_counter()
                list(pool.map(judge, episodes))
                rows.append((f"{n} distinct, max_concurrency={concurrency}", n / (time.perf_counter() - start)))
                start = time.perf_counter()
                list(pool.map(judge, episodes))
                rows.append((f"{n} repeats (cache hits), max_concurrency={concurrency}",
                             n / (time.perf_counter() - start)))
    finally:
        httpd.shutdown()
    print(f"\n## judge client, server latency {SlowJudge.latency_s * 1e3:.0f} ms per request\n")
    print("| judgements | per second |")
    print("|---|---|")
    for label, rate in rows:
        print(f"| {label} | {rate:,.0f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    tool_calls(args.calls)
    env_steps(args.calls)
    judge_throughput(64)


if __name__ == "__main__":
    main()
