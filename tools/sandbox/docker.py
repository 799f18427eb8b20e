"""`DockerSandbox` through the Docker SDK against a real dockerd, and `DockerPool`, a warm pool.

A container runs `sleep` as PID 1's child (docker-init reaps zombies) with no network, a memory limit
without swap, a CPU quota, a pids limit, a read-only root, size-limited tmpfs mounts at /workspace and
/tmp, all capabilities dropped and no-new-privileges. Commands run as uid 1000; at a timeout every
uid-1000 process is SIGKILLed (`kill -9 -1`), which takes the whole tree, daemons that called setsid
included, while PID 1 (root) lives on. Files move through `tar` over an exec's stdin/stdout because
`docker cp` cannot see tmpfs mounts.

Containers carry labels naming their owner (host, pid, start time); `reap_stale()` removes those whose
owner is gone (a killed trainer), at the first use in a process, and every container a process made is
removed at its exit. PID 1 also sleeps for at most `max_lifetime_s`, a last line of defence.
"""
from __future__ import annotations

import atexit
import collections
import io
import posixpath
import socket
import tarfile
import threading
import time
import weakref
from typing import Any

from agentgym.errors import require
from agentgym.tools.sandbox.base import (DEPS_MOUNT, KILLED_BY_SIGKILL, LABEL, MAX_OUTPUT, WORKSPACE, ExecResult,
                                         OutputBuffer, SandboxError, SandboxLimits, SandboxUnavailable,
                                         checked_deps_dir, monotonic, owner_alive, owner_tag, sandbox_env,
                                         tar_directory, workspace_path)

DEFAULT_IMAGE = "agentgym/swe-base:1"
AGENT_USER = "1000:1000"
SANDBOX_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": WORKSPACE, "LANG": "C.UTF-8", "TMPDIR": "/tmp",
               "PYTHONDONTWRITEBYTECODE": "1", "USER": "agent"}
_client_lock = threading.Lock()
_client: Any = None
_live: "weakref.WeakSet[DockerSandbox]" = weakref.WeakSet()


def client() -> Any:
    """One Docker client per process (its connection pool is thread-safe)."""
    global _client
    with _client_lock:
        if _client is None:
            docker = require("docker", "swe")
            try:
                _client = docker.from_env(timeout=900)
                _client.ping()
            except Exception as exc:
                _client = None
                raise SandboxUnavailable(f"no Docker daemon reachable ({type(exc).__name__}: {str(exc)[:160]}); "
                                         "start one with `bash scripts/start_dockerd.sh`") from exc
            reap_stale(_client)
            atexit.register(_close_all)
        return _client


def docker_problem(image: str = DEFAULT_IMAGE) -> str | None:
    """Why Docker sandboxes cannot run here (no SDK, no daemon, no image), or None if they can."""
    try:
        api = client()
    except (SandboxUnavailable, ImportError) as exc:
        return str(exc)
    try:
        api.images.get(image)
    except Exception:
        return f"the image {image!r} is not built; run `bash scripts/build_sandbox_image.sh`"
    return None


def labelled_containers(api: Any) -> list[tuple[str, str, str]]:
    """(id, name, owner tag) of every container carrying our label, running or not.

    One list call, nothing inspected: `containers.list()` inspects each container it lists, and a
    container another process removes in between makes that call raise NotFound.
    """
    return [(c["Id"], (c.get("Names") or ["/"])[0].lstrip("/"), (c.get("Labels") or {}).get(f"{LABEL}.owner", ""))
            for c in api.api.containers(all=True, filters={"label": LABEL})]


def reap_stale(api: Any) -> int:
    """Remove labelled containers whose owning process is gone; returns how many."""
    removed = 0
    for container_id, _, owner in labelled_containers(api):
        if owner_alive(owner):
            continue
        try:
            api.api.remove_container(container_id, force=True)
            removed += 1
        except Exception:  # already being removed by someone else
            pass
    return removed


def _close_all() -> None:
    for sandbox in list(_live):
        try:
            sandbox.close()
        except Exception:
            pass


def start_container(image: str, limits: SandboxLimits, max_lifetime_s: int = 6 * 3600,
                    deps_dir: str | None = None) -> Any:
    """Start one locked-down container and return it (the cold path a pool hides); `deps_dir` is bound
    read-only at DEPS_MOUNT and put on PYTHONPATH."""
    api = client()
    volumes = {deps_dir: {"bind": DEPS_MOUNT, "mode": "ro"}} if deps_dir else {}
    try:
        return api.containers.run(
            image, ["sleep", str(max_lifetime_s)], detach=True, user="0:0", init=True, network_mode="none",
            mem_limit=f"{limits.memory_mb}m", memswap_limit=f"{limits.memory_mb}m",
            nano_cpus=int(limits.cpus * 1e9), pids_limit=limits.pids, read_only=True,
            tmpfs={WORKSPACE: f"size={limits.disk_mb}m,uid=1000,gid=1000,mode=0755,exec",
                   "/tmp": f"size={limits.tmp_mb}m,mode=1777"},
            cap_drop=["ALL"], security_opt=["no-new-privileges"], hostname="sandbox", working_dir=WORKSPACE,
            ulimits=[{"Name": "fsize", "Soft": limits.max_file_mb * 2**20, "Hard": limits.max_file_mb * 2**20},
                     {"Name": "nofile", "Soft": 1024, "Hard": 1024}, {"Name": "core", "Soft": 0, "Hard": 0}],
            labels={LABEL: "1", f"{LABEL}.owner": owner_tag()}, environment=sandbox_env(SANDBOX_ENV, deps_dir),
            volumes=volumes)
    except Exception as exc:
        raise SandboxError(f"could not start a container from {image!r}: {str(exc)[:300]}") from exc


class DockerSandbox:
    """One container used as a sandbox; see the module docstring."""

    backend = "docker"

    def __init__(self, image: str = DEFAULT_IMAGE, limits: SandboxLimits | None = None, container: Any = None,
                 deps_dir: str | None = None):
        self.image = image
        self.limits = limits or SandboxLimits()
        self.deps_dir = checked_deps_dir(deps_dir)
        self.env = sandbox_env(SANDBOX_ENV, self.deps_dir)
        self.container = container if container is not None else start_container(image, self.limits,
                                                                                  deps_dir=self.deps_dir)
        self._api = client().api
        self._snapshot: bytes | None = None
        self._closed = False
        _live.add(self)

    # ------------------------------------------------------------------ low level
    def _exec_raw(self, argv: list[str], stdin: bytes | None = None, user: str = AGENT_USER,
                  workdir: str = WORKSPACE) -> tuple[int, bytes, bytes]:
        """Run argv to completion (no timeout: for our own short tar/find/kill helpers)."""
        try:
            exec_id = self._api.exec_create(self.container.id, argv, user=user, workdir=workdir,
                                            environment=self.env, stdin=stdin is not None)["Id"]
            if stdin is None:
                out, err = self._api.exec_start(exec_id, demux=True)
            else:
                out, err = self._send_stdin(exec_id, stdin)
            code = self._exit_code(exec_id)
        except SandboxError:
            raise
        except Exception as exc:
            raise SandboxError(f"the container failed: {_said(exc)}") from exc
        return code, out or b"", err or b""

    def _send_stdin(self, exec_id: str, data: bytes) -> tuple[bytes, bytes]:
        sock = self._api.exec_start(exec_id, socket=True)
        raw = getattr(sock, "_sock", sock)
        raw.settimeout(20.0)  # a reader that quit early must not leave us blocked on a full socket
        cut_short = None
        try:
            raw.sendall(data)
            raw.shutdown(socket.SHUT_WR)
        except OSError as exc:  # the reader stopped early (tar hit the disk limit) or the send timed out
            cut_short = exc
        received = []
        try:
            while chunk := raw.recv(65536):
                received.append(chunk)
        except OSError:
            pass
        raw.close()
        out, err = _demux(b"".join(received))
        if cut_short is not None:
            # never report success for a partial stream: tar exits 0 on an archive cut at a member boundary
            why = (err or b"").decode(errors="replace").strip()[:300] or f"{type(cut_short).__name__}: {cut_short}"
            raise SandboxError(f"the input to the sandbox was cut short ({why})")
        return out, err

    def _exit_code(self, exec_id: str) -> int:
        for _ in range(2000):  # up to ~10 s: a loaded host can take a while to reap the exec
            info = self._api.exec_inspect(exec_id)
            if not info.get("Running"):
                return int(info.get("ExitCode") if info.get("ExitCode") is not None else -1)
            time.sleep(0.005)
        return -1

    def _kill_agent_processes(self) -> None:
        try:
            self._exec_raw(["bash", "-c", "kill -9 -1"])  # bash's builtin: minimal images have no kill binary
        except SandboxError:
            pass

    # ------------------------------------------------------------------ commands
    def exec(self, command: str, timeout_s: float = 30.0, cwd: str = ".",
             max_output: int = MAX_OUTPUT) -> ExecResult:
        self._check_open()
        workdir = posixpath.join(WORKSPACE, workspace_path(cwd))
        start = monotonic()
        try:
            exec_id = self._api.exec_create(self.container.id, ["bash", "-c", command], user=AGENT_USER,
                                            workdir=workdir, environment=self.env)["Id"]
            stream = self._api.exec_start(exec_id, stream=True)
        except Exception as exc:
            raise SandboxError(f"the container failed: {_said(exc)}") from exc
        buffer, failure = OutputBuffer(max_output), []
        reader = threading.Thread(target=_drain, args=(stream, buffer, failure), daemon=True)
        reader.start()
        reader.join(max(0.01, timeout_s))
        timed_out = reader.is_alive()
        if timed_out:
            self._kill_agent_processes()
            reader.join(10.0)
        if failure and not timed_out:
            raise SandboxError(f"the container failed during a command: {failure[0]}")
        code = 137 if timed_out else self._exit_code(exec_id)
        if code == -1 and not self.alive():
            raise SandboxError("the container died during the command")
        output, truncated = buffer.text()
        killed = code in KILLED_BY_SIGKILL and not timed_out
        return ExecResult(code, output, monotonic() - start, timed_out, killed, truncated)

    # ------------------------------------------------------------------ files
    def read_file(self, path: str) -> bytes:
        self._check_open()
        rel = workspace_path(path)
        code, out, err = self._exec_raw(["cat", "--", posixpath.join(WORKSPACE, rel)])
        if code != 0:
            message = err.decode(errors="replace")
            if "No such file" in message:
                raise SandboxError(f"no such file or directory: {path!r}")
            if "Is a directory" in message:
                raise SandboxError(f"{path!r} is a directory")
            raise SandboxError(message.strip() or f"cannot read {path!r}")
        return out

    def write_file(self, path: str, data: bytes | str) -> None:
        self._check_open()
        rel = workspace_path(path)
        raw = data.encode() if isinstance(data, str) else data
        if len(raw) > self.limits.max_file_mb * 2**20:
            raise SandboxError(f"{len(raw) / 2**20:.0f} MB exceed the {self.limits.max_file_mb} MB file size limit")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.uid, info.gid, info.mtime = len(raw), 0o644, 1000, 1000, int(time.time())
            tar.addfile(info, io.BytesIO(raw))
        self._untar(buf.getvalue(), WORKSPACE)

    def _untar(self, data: bytes, dest: str) -> None:
        if len(data) > self.limits.disk_mb * 2**20:
            raise SandboxError(f"{len(data) / 2**20:.0f} MB do not fit in the {self.limits.disk_mb} MB workspace")
        # one exec (mkdir + untar): each exec is a runc round trip
        code, _, err = self._exec_raw(["sh", "-c", 'mkdir -p "$0" && exec tar -x --no-same-owner -C "$0" -f -', dest],
                                      stdin=data)
        if code != 0:
            raise SandboxError(f"copy into the workspace failed (exit {code}): "
                               f"{err.decode(errors='replace').strip()[:300] or 'the workspace is full?'}")

    def list_files(self, path: str = ".") -> list[str]:
        self._check_open()
        rel = workspace_path(path)
        code, out, err = self._exec_raw(["find", rel, "-type", "f", "-not", "-path", "*/__pycache__/*",
                                         "-not", "-path", "*/.pytest_cache/*"])
        if code != 0:
            raise SandboxError(err.decode(errors="replace").strip() or f"cannot list {path!r}")
        return sorted(posixpath.normpath(p) for p in out.decode(errors="replace").splitlines() if p)

    def copy_in(self, host_dir: str, dest: str = ".") -> None:
        self._check_open()
        target = posixpath.join(WORKSPACE, workspace_path(dest))
        self._untar(tar_directory(host_dir), target)

    def copy_out(self, src: str, host_dir: str) -> None:
        self._check_open()
        from agentgym.tools.sandbox.base import extract_tar

        code, out, err = self._exec_raw(["tar", "-c", "-C", posixpath.join(WORKSPACE, workspace_path(src)),
                                         "-f", "-", "."])
        if code != 0:
            raise SandboxError(f"copy out failed: {err.decode(errors='replace').strip()[:300]}")
        extract_tar(out, host_dir)

    def snapshot(self) -> None:
        self._check_open()
        code, out, err = self._exec_raw(["tar", "-c", "-C", WORKSPACE, "-f", "-", "."])
        if code != 0:
            raise SandboxError(f"snapshot failed: {err.decode(errors='replace').strip()[:300]}")
        self._snapshot = out

    def reset(self) -> None:
        self._check_open()
        self._kill_agent_processes()
        code, _, err = self._exec_raw(["sh", "-c", f"find {WORKSPACE} /tmp -mindepth 1 -delete 2>/dev/null; "
                                       f"tar -x --no-same-owner -C {WORKSPACE} -f -"],
                                      stdin=self._snapshot or _EMPTY_TAR)
        if code != 0:
            raise SandboxError(f"reset failed: {err.decode(errors='replace').strip()[:300]}")

    def alive(self) -> bool:
        if self._closed:
            return False
        try:
            self.container.reload()
            return self.container.status == "running"
        except Exception:
            return False

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("the sandbox is closed")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.container.remove(force=True)
        except Exception:  # already gone (killed, reaped)
            pass

    def __enter__(self) -> "DockerSandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_EMPTY_TAR = b"\0" * 1024


def _drain(stream: Any, buffer: OutputBuffer, failure: list[str]) -> None:
    try:
        for chunk in stream:
            buffer.add(chunk)
    except Exception as exc:  # the connection broke: the container died or the daemon went away
        failure.append(f"{type(exc).__name__}: {str(exc)[:200]}")


def _demux(data: bytes) -> tuple[bytes, bytes]:
    """Split Docker's multiplexed stream (8-byte frame headers: stream id, size) into stdout and stderr."""
    out, err, i = [], [], 0
    while i + 8 <= len(data):
        kind, size = data[i], int.from_bytes(data[i + 4:i + 8], "big")
        (err if kind == 2 else out).append(data[i + 8:i + 8 + size])
        i += 8 + size
    return b"".join(out), b"".join(err)


class DockerPool:
    """Keeps `size` started containers ready, so taking a sandbox does not wait for a container start.

    `acquire()` hands out a warm container (or starts one if the pool is empty); `release()` removes a
    used one in the background. A refill thread tops the pool up; `close()` removes everything.
    """

    def __init__(self, image: str = DEFAULT_IMAGE, limits: SandboxLimits | None = None, size: int = 2,
                 deps_dir: str | None = None):
        self.image, self.limits, self.size = image, limits or SandboxLimits(), max(0, size)
        self.deps_dir = checked_deps_dir(deps_dir)
        self._ready: collections.deque[Any] = collections.deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._starting = 0
        self._thread = threading.Thread(target=self._refill, name="docker-pool", daemon=True)
        self._thread.start()
        self._wake.set()

    def _refill(self) -> None:
        while not self._closed:
            self._wake.wait(1.0)
            self._wake.clear()
            while not self._closed:
                with self._lock:
                    if len(self._ready) + self._starting >= self.size:
                        break
                    self._starting += 1
                try:
                    container = start_container(self.image, self.limits, deps_dir=self.deps_dir)
                except SandboxError:
                    time.sleep(1.0)
                    container = None
                with self._lock:
                    self._starting -= 1
                    if container is not None and not self._closed:
                        self._ready.append(container)
                        container = None
                if container is not None:  # closed meanwhile
                    _remove_quietly(container)

    def acquire(self) -> DockerSandbox:
        while True:
            with self._lock:
                container = self._ready.popleft() if self._ready else None
            if container is None or _running(container):
                break
            _remove_quietly(container)  # stopped while it waited (a daemon restart stops them): never handed out
        self._wake.set()
        return DockerSandbox(self.image, self.limits, container=container, deps_dir=self.deps_dir)

    def release(self, sandbox: DockerSandbox) -> None:
        threading.Thread(target=sandbox.close, daemon=True).start()

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        with self._lock:
            ready, self._ready = list(self._ready), collections.deque()
        for container in ready:
            _remove_quietly(container)


def _said(exc: Exception) -> str:
    """An exception in a line: the daemon's own explanation first (an API error's str starts with the URL,
    which cut at 200 characters hid the cause: "... is paused, unpause the container before exec")."""
    explanation = getattr(exc, "explanation", None)
    return f"{type(exc).__name__}: {str(explanation or exc)[:300]}"


def _running(container: Any) -> bool:
    try:
        container.reload()
        return container.status == "running"
    except Exception:
        return False


def _remove_quietly(container: Any) -> None:
    try:
        container.remove(force=True)
    except Exception:
        pass
