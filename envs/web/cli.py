"""`agentgym serve shop [--port 8010] [--products 10000] [--seed 0]`: the WebShop-style shop on loopback.

Envs reach it with url=..., e.g. agentgym.make("agentgym/WebShop-v0", url="http://127.0.0.1:8010");
a person opens http://127.0.0.1:8010/ for a new session with a random instruction.
"""
from __future__ import annotations

import argparse
import socket
from typing import Any

from agentgym.cli import serve_subparsers
from agentgym.errors import ConfigError



def add_parser(subparsers: Any) -> None:
    shop = serve_subparsers(subparsers).add_parser(
        "shop", help="serve the WebShop-style shop (search, items, options, buy)", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    shop.add_argument("--host", default="127.0.0.1", help="bind address (default: %(default)s, loopback)")
    shop.add_argument("--port", type=int, default=8010, help="port, 0 for any free one (default: %(default)s)")
    shop.add_argument("--products", type=int, default=10_000, help="catalogue size (default: %(default)s)")
    shop.add_argument("--seed", type=int, default=0, help="catalogue seed (default: %(default)s)")
    shop.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be between 0 and 65535, got {args.port}")
    if args.products < 10:
        raise ConfigError(f"--products must be at least 10, got {args.products}")
    from agentgym.envs.web.shop.app import create_app
    from agentgym.envs.web.shop.site import ShopSite
    from agentgym.errors import require

    uvicorn = require("uvicorn", "web")
    site = ShopSite(args.seed, args.products)
    config = uvicorn.Config(create_app(site), host=args.host, port=args.port, log_level="warning",
                            access_log=False)
    sock = socket.socket(socket.AF_INET6 if ":" in args.host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:   # bind first, so port 0 can be told and a taken port is a one-line error
        sock.bind((args.host, args.port))
    except OSError as exc:
        raise ConfigError(f"cannot bind {args.host}:{args.port} ({exc.strerror}); pick another --port") from exc
    sock.listen(2048)   # connections queue from now on, so the line below is true once printed
    port = sock.getsockname()[1]
    print(f"serving a shop of {len(site.catalog)} products at http://{args.host}:{port}", flush=True)
    uvicorn.Server(config).run(sockets=[sock])
    return 0
