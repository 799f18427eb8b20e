"""The demo site `agentgym/Web-v0` opens when given no URL: a support form served from the package on
loopback (a static http.server thread, shared by the process), with a task and a JS success check."""
from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

ROOT = Path(__file__).with_name("demo")
TASK = ('Send the support desk a message: your name is "Ada Lovelace", the topic is Billing, and the message '
        'is "Please refund order 1234".')
SUCCESS_JS = ("window.sent !== undefined && window.sent.name === 'Ada Lovelace' && window.sent.topic === 'billing'"
              " && window.sent.message === 'Please refund order 1234'")

_SERVER: http.server.ThreadingHTTPServer | None = None
_LOCK = threading.Lock()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def demo_url() -> str:
    global _SERVER
    with _LOCK:
        if _SERVER is None:
            _SERVER = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(ROOT)))
            _SERVER.daemon_threads = True
            threading.Thread(target=_SERVER.serve_forever, name="agentgym-web-demo", daemon=True).start()
        return f"http://127.0.0.1:{_SERVER.server_address[1]}/index.html"
