"""The retrieval server: one index in one process, shared by many env workers over loopback HTTP.

    POST /search        {"query": str, "k": int = 3, "method": "bm25"}        -> {"hits": [Hit, ...]}
    POST /batch_search  {"queries": [str], "k": int = 3, "method": "bm25"}    -> {"results": [[Hit, ...]]}
    GET  /health        -> {"status": "ok", "documents": n, "methods": [...], "fingerprint": str}

Malformed requests get JSON errors (422 for a body that does not validate, 400 for a method the server
was not started with) and never take the server down. Endpoints are plain `def`, so FastAPI runs them
on its thread pool and concurrent clients are served in parallel (BM25 scoring releases the GIL in numpy).
Start it with `agentgym serve retrieval --corpus ...`, `ServerThread` (in-process), or `launch_server`.
"""
# no `from __future__ import annotations`: FastAPI must see the request models as classes, not strings
import atexit
import subprocess
import sys
import threading
import time
from typing import Any

from agentgym.errors import require
from agentgym.tools.retrieval.base import Retriever
from agentgym.tools.retrieval.corpus import Corpus, RetrievalError

MAX_K = 100
MAX_QUERY_CHARS = 10_000
MAX_BATCH = 1024


def create_app(corpus: Corpus, retrievers: dict[str, Retriever]) -> Any:
    """A FastAPI app serving the given retrievers (method name -> index) over one corpus."""
    fastapi = require("fastapi", "search")
    from pydantic import BaseModel, Field

    class SearchRequest(BaseModel):
        query: str = Field(max_length=MAX_QUERY_CHARS)
        k: int = Field(3, ge=1, le=MAX_K)
        method: str = "bm25"

    class BatchRequest(BaseModel):
        queries: list[str] = Field(max_length=MAX_BATCH)
        k: int = Field(3, ge=1, le=MAX_K)
        method: str = "bm25"

    app = fastapi.FastAPI(title="agentgym retrieval", docs_url=None, redoc_url=None)

    def pick(method: str) -> Any:
        if method not in retrievers:
            raise fastapi.HTTPException(400, f"method {method!r} is not served here; served: "
                                             f"{', '.join(retrievers)} (start the server with --dense for dense)")
        return retrievers[method]

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "documents": len(corpus), "methods": list(retrievers),
                "fingerprint": corpus.fingerprint, "corpus": corpus.name}

    @app.post("/search")
    def search(request: SearchRequest) -> dict[str, Any]:
        hits = pick(request.method).search(request.query, request.k)
        return {"hits": [h.to_dict() for h in hits]}

    @app.post("/batch_search")
    def batch_search(request: BatchRequest) -> dict[str, Any]:
        if any(len(q) > MAX_QUERY_CHARS for q in request.queries):
            raise fastapi.HTTPException(422, f"each query must be at most {MAX_QUERY_CHARS} characters")
        results = pick(request.method).search_batch(request.queries, request.k)
        return {"results": [[h.to_dict() for h in hits] for hits in results]}

    return app


def build_retrievers(corpus: Corpus, dense: bool = False, cache_dir: str | None = None) -> dict[str, Retriever]:
    from agentgym.tools.retrieval.base import get_retriever

    methods = ("bm25", "dense") if dense else ("bm25",)
    return {m: get_retriever(corpus, m, cache_dir=cache_dir) for m in methods}


class ServerThread:
    """A real uvicorn server on 127.0.0.1 in a background thread; `port=0` picks a free port.

    with ServerThread(app) as server:
        RetrievalClient(server.url).search("query")
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning"):
        uvicorn = require("uvicorn", "search")
        self.server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level,
                                                    access_log=False, lifespan="off"))
        self.server.install_signal_handlers = lambda: None  # not the main thread
        self.host = host
        self.thread = threading.Thread(target=self.server.run, daemon=True, name="retrieval-server")

    def start(self, timeout_s: float = 30.0) -> "ServerThread":
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RetrievalError("the retrieval server did not start (is the port free?)")
            time.sleep(0.01)
        return self

    @property
    def port(self) -> int:
        return self.server.servers[0].sockets[0].getsockname()[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def __enter__(self) -> "ServerThread":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


_LAUNCHED: dict[tuple[str, bool], tuple[subprocess.Popen, str]] = {}


def launch_server(corpus_spec: str, dense: bool = False, port: int = 0, timeout_s: float = 300.0) -> str:
    """Start `agentgym serve retrieval` in a child process (once per spec in this process); its URL.

    The child is stopped when this process exits. Used by `SearchEnv(retriever_url="auto")`.
    """
    key = (corpus_spec, dense)
    if key in _LAUNCHED and _LAUNCHED[key][0].poll() is None:
        return _LAUNCHED[key][1]
    if port == 0:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "agentgym.cli", "serve", "retrieval", "--corpus", corpus_spec, "--port", str(port)]
    proc = subprocess.Popen(cmd + (["--dense"] if dense else []), stdout=subprocess.DEVNULL)
    atexit.register(_stop, proc)
    url = f"http://127.0.0.1:{port}"
    from agentgym.tools.retrieval.client import RetrievalClient

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RetrievalError(f"the retrieval server exited with code {proc.returncode}: {' '.join(cmd)}")
        try:
            RetrievalClient(url, retries=0, timeout_s=1.0).health()
            _LAUNCHED[key] = (proc, url)
            return url
        except RetrievalError:
            time.sleep(0.2)
    _stop(proc)
    raise RetrievalError(f"the retrieval server did not answer within {timeout_s:g} s: {' '.join(cmd)}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
