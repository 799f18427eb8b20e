"""The shop as an ASGI app (Starlette) and a uvicorn server on loopback in a daemon thread.

    POST   /api/sessions {"split": "test", "index": 3}  -> {"sid", "start", "instruction", ...}
    GET    /api/sessions/{sid}                           -> the session's state (done, reward, components)
    DELETE /api/sessions/{sid}
    GET    /s/{sid}/...                                  the pages (ShopSite.dispatch); POST /s/{sid}/buy/{asin}
    GET    /                                             a new session with a random goal (for a person)

The server thread dies with its process, so no server outlives the env or a killed parent.
"""
from __future__ import annotations

import random
import threading
import time
from urllib.parse import parse_qsl

from agentgym.envs.web.shop.goals import canonical_split
from agentgym.envs.web.shop.site import ShopSite
from agentgym.errors import require

MAX_BODY = 64_000


def create_app(site: ShopSite):
    require("starlette", "web")
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse
    from starlette.routing import Route

    async def new_session(request: Request):
        try:
            body = await request.json() if (await request.body()) else {}
            split, index = canonical_split(body.get("split", "train")), int(body.get("index", 0))
        except (ValueError, TypeError, AttributeError) as exc:
            return JSONResponse({"error": f"bad session request: {exc}; send "
                                          '{"split": "train|valid|test", "index": <int>}'}, status_code=400)
        session = site.new_session(split, index)
        return JSONResponse({**session.state(), "start": f"/s/{session.sid}/"})

    async def session_state(request: Request):
        session = site.session(request.path_params["sid"])
        if session is None:
            return JSONResponse({"error": "unknown or expired session"}, status_code=404)
        if request.method == "DELETE":
            site.end_session(session.sid)
            return JSONResponse({"deleted": session.sid})
        return JSONResponse(session.state())

    async def home(request: Request):
        session = site.new_session("test", random.randrange(1_000_000))
        return RedirectResponse(f"/s/{session.sid}/", status_code=303)

    async def pages(request: Request):
        params = dict(request.query_params)
        if request.method == "POST":
            body = (await request.body())[:MAX_BODY].decode("utf-8", "replace")
            params = dict(parse_qsl(body, keep_blank_values=True))
        page = site.dispatch(request.method, request.url.path, params)
        if request.method == "POST" and page.status == 200:   # post/redirect/get: reload and back stay safe
            return RedirectResponse(page.path, status_code=303)
        return HTMLResponse(page.html, status_code=page.status)

    async def health(request: Request):
        return JSONResponse({"ok": True, "products": len(site.catalog), "sessions": len(site.sessions)})

    return Starlette(routes=[
        Route("/", home), Route("/api/health", health),
        Route("/api/sessions", new_session, methods=["POST"]),
        Route("/api/sessions/{sid}", session_state, methods=["GET", "DELETE"]),
        Route("/s/{rest:path}", pages, methods=["GET", "POST"]),
    ])


class ShopServer:
    """uvicorn serving `create_app(site)` on `host:port` (port 0: a free one) in a daemon thread."""

    def __init__(self, site: ShopSite, host: str = "127.0.0.1", port: int = 0):
        uvicorn = require("uvicorn", "web")
        self.site = site
        config = uvicorn.Config(create_app(site), host=host, port=port, log_level="warning", access_log=False,
                                lifespan="off")
        self.server = uvicorn.Server(config)
        self.server.install_signal_handlers = lambda: None   # not the main thread; the parent owns signals
        self.thread = threading.Thread(target=self.server.run, name="agentgym-shop-server", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the shop server did not start on {host}:{port}")
            time.sleep(0.01)
        bound = self.server.servers[0].sockets[0].getsockname()
        self.url = f"http://{host}:{bound[1]}"

    def close(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


_SERVERS: dict[int, ShopServer] = {}
_LOCK = threading.Lock()


def shared_server(site: ShopSite) -> ShopServer:
    """One loopback server per site per process, started on first use (browser envs need a URL)."""
    with _LOCK:
        server = _SERVERS.get(id(site))
        if server is None or not server.thread.is_alive():
            server = _SERVERS[id(site)] = ShopServer(site)
        return server
