"""`python guard.py -- CMD ...`: run CMD, and stop it when the process that started us goes away.

agentgym starts MCP servers (stdio, or HTTP that it launches) through this guard, the leader of a process
group of its own that CMD joins. Closing a session signals the group, as before. But if agentgym dies
without closing - SIGKILL, OOM - the guard sees its parent change, terminates CMD, and kills the whole
group after a grace period, so no server outlives its owner. The guard exits with CMD's exit code and never touches
CMD's stdin or stdout (a stdio server speaks JSON-RPC on them). Run by path: it imports nothing of agentgym.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

GRACE_S = 3.0
POLL_S = 0.2


def main(argv: list[str]) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: python guard.py -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    parent = os.getppid()
    try:
        child = subprocess.Popen(argv)
    except OSError as exc:
        print(f"cannot start {argv[0]!r}: {exc}", file=sys.stderr)
        return 127

    def watch_parent() -> None:
        while os.getppid() == parent:
            time.sleep(POLL_S)
        child.terminate()  # the server first, gently; then the whole group, this guard included
        deadline = time.monotonic() + GRACE_S
        while child.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        os.killpg(os.getpgrp(), signal.SIGKILL)

    threading.Thread(target=watch_parent, daemon=True).start()
    return child.wait()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
