"""Core overheads: tool-call parsing per turn (and per registered format), the tag scan vs. the old lazy regex, and check_env per env.

Parsing runs every env step, so it must cost microseconds on ordinary actions and stay linear on
garbage (a model can emit 100 kB of unclosed tags). The old `extract_tag` (a lazy regex) and the
current linear scan run side by side on the same inputs in one process; read the ratio. Then
`check_env` time per registered env, the price of `agentgym check --all` (slow envs dominate).

    python benchmarks/core_parsing.py              # parsing only (seconds)
    python benchmarks/core_parsing.py --check-envs # plus check_env per registered env
"""
from __future__ import annotations

import argparse
import json
import re
import time
import warnings

from agentgym.tools import extract_tag, parse_tool_calls

TYPICAL = {
    "plain command": "go to countertop 1",
    "action tag": "I should look around first.\n<action>look</action>",
    "answer tag": "The capital is Paris.\n<answer>Paris</answer>",
    "two hermes calls": "Let me search.\n" + "\n".join(
        f'<tool_call>{json.dumps({"name": "search", "arguments": {"query": q, "k": 3}})}</tool_call>'
        for q in ("eiffel tower height", "paris population")),
    "openai json": json.dumps({"tool_calls": [{"type": "function", "function": {
        "name": "calculate", "arguments": json.dumps({"expression": "(3 + 4) * 5"})}}]}),
}


def old_extract_tag(text: str, tag: str) -> str | None:
    """The lazy-regex version `extract_tag` replaced (quadratic on unclosed tags)."""
    matches = re.findall(rf"<{tag}>(.*?)</{tag}>", text[:200_000], re.S)
    return matches[-1].strip() if matches else None


def per_call_us(fn, text: str, budget_s: float = 0.3) -> float:
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < budget_s:
        fn(text)
        calls += 1
    return (time.perf_counter() - start) / calls * 1e6


def parse_turn(text: str) -> None:
    """What a ToolEnv / tag env does with one action."""
    extract_tag(text, "answer")
    extract_tag(text, "action")
    parse_tool_calls(text)


def typical_table() -> None:
    print("== parsing one action (answer tag + action tag + tool calls), microseconds per action")
    for name, text in TYPICAL.items():
        print(f"  {name:<18} {len(text):>6} chars  {per_call_us(parse_turn, text):8.1f} us")


def formats_table() -> None:
    """Every registered tool-call format on two calls it rendered itself, and on 200 kB of its own opener
    repeated (the worst case a model can emit): microseconds / milliseconds per parse."""
    from agentgym.toolcall_formats import FORMATS, ToolCall

    calls = [ToolCall("search", {"query": "eiffel tower height", "k": 3}), ToolCall("calculate", {"expression": "3*4"})]
    print("\n== each tool-call format: two calls it rendered (us per parse), 200 kB of its opener repeated (ms)")
    for name, fmt in FORMATS.items():
        text = "Let me check.\n" + "\n".join(fmt.render_call(c) for c in calls)
        opener = fmt.render_call(calls[0])[:12] or "{"
        garbage = opener * (200_000 // len(opener))
        start = time.perf_counter()
        fmt.parse(garbage, None)
        fmt.looks_like(garbage)
        garbage_ms = 1e3 * (time.perf_counter() - start)
        print(f"  {name:<13} {per_call_us(lambda t: fmt.parse(t, None), text, 0.1):8.1f} us   "
              f"{opener!r:<18} x{200_000 // len(opener):<6} {garbage_ms:8.2f} ms")


def unclosed_tags_table() -> None:
    print("\n== extract_tag on '<answer>' repeated, no closing tag: old lazy regex vs linear scan")
    print(f"  {'chars':>8}  {'regex ms':>10}  {'scan ms':>9}  {'ratio':>7}")
    for repeats in (500, 1_000, 2_000, 4_000):
        text = "<answer>" * repeats
        regex_ms = per_call_us(lambda t: old_extract_tag(t, "answer"), text, 0.5) / 1e3
        scan_ms = per_call_us(lambda t: extract_tag(t, "answer"), text, 0.2) / 1e3
        print(f"  {len(text):>8}  {regex_ms:>10.2f}  {scan_ms:>9.3f}  {regex_ms / scan_ms:>6.0f}x")
    text = "<answer>" * 25_000
    start = time.perf_counter()
    extract_tag(text, "answer")
    print(f"  200 kB (the parse limit): scan {1e3 * (time.perf_counter() - start):.2f} ms "
          "(the regex took ~30 s here)")


def check_envs_table() -> None:
    import agentgym
    from agentgym.checker import check_env
    from agentgym.errors import MissingDependencyError

    print("\n== check_env(seeds=(0,)) per registered env, seconds (first run includes building/caching tasks)")
    total = 0.0
    for env_id in agentgym.list_envs():
        start = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                status = f"{len(check_env(env_id, seeds=(0,)).checks)} checks"
        except MissingDependencyError as exc:
            status = f"skipped ({exc})"
        except agentgym.errors.CheckError as exc:
            status = f"FAILED {str(exc)[:60]}"
        seconds = time.perf_counter() - start
        total += seconds
        print(f"  {env_id:<38} {seconds:6.2f} s  {status}")
    print(f"  {'total':<38} {total:6.2f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check-envs", action="store_true", help="also time check_env on every registered env")
    args = parser.parse_args()
    typical_table()
    formats_table()
    unclosed_tags_table()
    if args.check_envs:
        check_envs_table()


if __name__ == "__main__":
    main()
