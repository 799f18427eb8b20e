"""`agentgym serve env ID [--kwargs JSON] [--host 127.0.0.1] [--port 8020]`: any registered env over HTTP.

Clients play it as `remote:http://HOST:PORT/ID` wherever an env id is taken (agentgym eval, train configs,
check), e.g. `agentgym check remote:http://127.0.0.1:8020/agentgym/Toy-KeyDoor-v0`. GET /openapi.json
describes the API; GET /health says whether it is up and how busy.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

from agentgym.cli import serve_subparsers
from agentgym.errors import ConfigError


def add_parser(subparsers: Any) -> None:
    env = serve_subparsers(subparsers).add_parser(
        "env", help="serve any registered env over HTTP (play it as remote:URL/ID)", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    env.add_argument("env_id", metavar="ID", help="a registered env id (agentgym list)")
    env.add_argument("--kwargs", default="{}", help="JSON object of env kwargs (default: %(default)s)")
    env.add_argument("--host", default="127.0.0.1", help="bind address (default: %(default)s, loopback)")
    env.add_argument("--port", type=int, default=8020, help="port, 0 for any free one (default: %(default)s)")
    env.add_argument("--max-sessions", type=int, default=256, help="open sessions at once (default: %(default)s)")
    env.add_argument("--max-concurrent", type=int, default=32,
                     help="env calls running at once; more wait, then get 503 (default: %(default)s)")
    env.add_argument("--idle-timeout", type=float, default=600.0,
                     help="close a session idle this many seconds (default: %(default)s)")
    env.add_argument("--max-body-mb", type=float, default=16.0, help="largest request body (default: %(default)s)")
    env.set_defaults(func=run)


def parse_kwargs(text: str) -> dict[str, Any]:
    try:
        kwargs = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"--kwargs must be a JSON object, e.g. '{{\"length\": 6}}' ({exc})") from exc
    if not isinstance(kwargs, dict):
        raise ConfigError(f"--kwargs must be a JSON object, e.g. '{{\"length\": 6}}', got {type(kwargs).__name__}")
    return kwargs


def run(args: argparse.Namespace) -> int:
    from agentgym.envs.remote.server import EnvServer
    from agentgym.envs.remote.service import EnvService, ServiceConfig
    from agentgym.registration import make

    kwargs = parse_kwargs(args.kwargs)
    config = ServiceConfig(max_sessions=args.max_sessions, max_concurrent=args.max_concurrent,
                           idle_timeout_s=args.idle_timeout, max_body_bytes=int(args.max_body_mb * (1 << 20)))
    make(args.env_id, **kwargs).close()   # bad kwargs or a missing dependency fail now, in one line
    server = EnvServer(EnvService(args.env_id, kwargs, config), args.host, args.port)
    print(f"serving {args.env_id} at {server.url} (play it as remote:{server.url}/{args.env_id})", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0
