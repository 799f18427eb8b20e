"""`agentgym serve retrieval --corpus SPEC [--port 8000] [--dense]`: a retrieval server on loopback.

SPEC is a JSONL corpus path (id/title/text or Search-R1 `contents`) or `generated:SEED[:SIZE]`, the
documents of a generated search world (what `agentgym/Search-*` envs use by default).
"""
from __future__ import annotations

import argparse
from typing import Any

from agentgym.cli import serve_subparsers
from agentgym.errors import ConfigError


def add_parser(subparsers: Any) -> None:
    retrieval = serve_subparsers(subparsers).add_parser("retrieval", help="serve BM25 (and dense) search over a corpus",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    retrieval.add_argument("--corpus", default="generated:0:small",
                           help="JSONL corpus path or generated:SEED[:SIZE] (default: %(default)s)")
    retrieval.add_argument("--host", default="127.0.0.1", help="bind address (default: %(default)s, loopback)")
    retrieval.add_argument("--port", type=int, default=8000, help="port (default: %(default)s)")
    retrieval.add_argument("--dense", action="store_true", help="also serve dense (MiniLM) retrieval")
    retrieval.add_argument("--cache-dir", default=None, help="keep built indexes here and reuse them")
    retrieval.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise ConfigError(f"--port must be between 0 and 65535, got {args.port}")
    from agentgym.errors import require
    from agentgym.tools.retrieval.corpus import corpus_from_spec
    from agentgym.tools.retrieval.server import build_retrievers, create_app

    corpus = corpus_from_spec(args.corpus)
    retrievers = build_retrievers(corpus, dense=args.dense, cache_dir=args.cache_dir)
    print(f"serving {len(corpus)} documents ({', '.join(retrievers)}) at http://{args.host}:{args.port}", flush=True)
    require("uvicorn", "search").run(create_app(corpus, retrievers), host=args.host, port=args.port,
                                     log_level="warning", access_log=False)
    return 0
