"""A scripted OpenAI-compatible judge server on loopback, shared by the judge tests: a real HTTP server
whose replies the test decides, recording every request and the peak number served at once."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ScriptedJudgeServer:
    """`/v1/chat/completions` on 127.0.0.1: `reply(body) -> (status, text)`, with an optional delay per request;
    records every request and the peak number served at once."""

    def __init__(self, reply, delay_s: float = 0.0):
        self.reply, self.delay_s = reply, delay_s
        self.requests: list[dict] = []
        self.active = self.peak = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._send(200, {"data": [{"id": "scripted-judge"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.requests.append(body)
                    outer.active += 1
                    outer.peak = max(outer.peak, outer.active)
                try:
                    time.sleep(outer.delay_s)
                    status, text = outer.reply(body)
                finally:
                    with outer.lock:
                        outer.active -= 1
                self._send(status, {"choices": [{"message": {"role": "assistant", "content": text}}]}
                           if status == 200 else {"error": text})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
