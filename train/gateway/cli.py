"""`agentgym serve gateway --policy SPEC [--port 8030] [--record FILE]`: an OpenAI-compatible endpoint in front
of a policy that records every call's token ids and log-probs per session.

An outside agent (any program on the official `openai` client, LangChain, a coding harness) calls
http://HOST:PORT/v1/chat/completions unchanged, with a session id as its API key (or the X-Session-Id
header). Open a session with POST /v1/sessions, send a reward with POST /v1/sessions/ID/reward, end it with
POST /v1/sessions/ID/close; with --record each closed session's trajectory (its calls merged on exact token
prefixes) is appended to FILE as JSON. docs/guide/gateway.md shows the whole loop, training included.

SPEC is any policy spec agentgym loads (hf:MODEL, checkpoint:DIR, vllm:MODEL, openai:URL with its tokenizer)
or tiny:keydoor (the CPU test model, built under --work-dir).
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from agentgym.cli import serve_subparsers
from agentgym.errors import ConfigError



def add_parser(subparsers: Any) -> None:
    p = serve_subparsers(subparsers).add_parser(
        "gateway", help="an OpenAI-compatible endpoint that records an outside agent's calls for training",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--policy", required=True, help="the policy spec behind it (hf:MODEL, checkpoint:DIR, tiny:keydoor, ...)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default: %(default)s, loopback)")
    p.add_argument("--port", type=int, default=8030, help="port, 0 for any free one (default: %(default)s)")
    p.add_argument("--model-name", default="agentgym", help="the model name /v1/models lists (default: %(default)s)")
    p.add_argument("--max-new-tokens", type=int, default=256, help="a call's max_tokens limit (default: %(default)s)")
    p.add_argument("--max-context-tokens", type=int, default=None, help="prompt + max_tokens limit (default: none)")
    p.add_argument("--max-sessions", type=int, default=256, help="sessions open at once (default: %(default)s)")
    p.add_argument("--max-batch", type=int, default=32, help="calls generated together (default: %(default)s)")
    p.add_argument("--max-body-mb", type=float, default=4.0, help="largest request body (default: %(default)s)")
    p.add_argument("--record", default=None, help="append each closed session's trajectory to this JSONL file")
    p.add_argument("--work-dir", default="runs/gateway", help="where tiny:NAME is built (default: %(default)s)")
    p.set_defaults(func=run)


def load(spec: str, work_dir: str) -> tuple[Any, Any]:
    """(policy, its chat format) for a spec; tiny:NAME is built first and served as hf:DIR."""
    from agentgym.policy import load_policy

    if spec.startswith("tiny:"):
        from agentgym.train.tiny import build_tiny

        try:
            spec = "hf:" + str(build_tiny(Path(work_dir) / f"tiny-{spec[5:]}", spec[5:]))
        except ValueError as exc:
            raise ConfigError(f"--policy {spec}: {exc}") from exc
    policy: Any = load_policy(spec)
    if not callable(getattr(policy, "chat_format", None)):
        raise ConfigError(f"--policy {spec}: {type(policy).__name__} has no tokenizer to render chat requests with; "
                          "serve a model policy (hf:, checkpoint:, vllm:, openai:URL with tokenizer=)")
    return policy, policy.chat_format()


def run(args: argparse.Namespace) -> int:
    from agentgym.train.gateway.app import GatewayServer
    from agentgym.train.gateway.service import Gateway, GatewayConfig

    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be between 0 and 65535, got {args.port}")
    try:
        config = GatewayConfig(model=args.model_name, max_new_tokens=args.max_new_tokens,
                               max_context_tokens=args.max_context_tokens, max_sessions=args.max_sessions,
                               max_batch=args.max_batch, max_body_bytes=int(args.max_body_mb * (1 << 20)))
    except ValueError as exc:
        raise ConfigError(f"{exc} (the --max-* options)") from exc
    policy, chat = load(args.policy, args.work_dir)
    gateway = Gateway(policy, chat, config, record=args.record)
    server = GatewayServer(gateway, args.host, args.port).start()
    print(f"serving {args.policy} at {server.url} (OpenAI base URL; open a session with POST {server.url}/sessions)",
          flush=True)
    try:
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        gateway.close()
    return 0
