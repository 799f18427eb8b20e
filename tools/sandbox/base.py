"""The `Sandbox` protocol shared by the Docker and bubblewrap back ends, and the pieces both use.

A sandbox is one isolated workspace (`/workspace` inside) in which commands run with a wall-clock
timeout that kills the whole process tree. Files move in and out as bytes or as whole directories
(a tar stream), and `snapshot()` / `reset()` record and restore the workspace so an episode can be
replayed from its start without a new sandbox.
"""
from __future__ import annotations

import io
import os
import posixpath
import tarfile
import time
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from agentgym.errors import AgentGymError

WORKSPACE = "/workspace"
DEPS_MOUNT = "/opt/agentgym-deps"  # a host folder of Python packages (a repository's test requirements), read-only
LABEL = "agentgym.sandbox"       # every container / host dir we make carries it, so strays can be reaped
MAX_OUTPUT = 64_000              # characters of command output kept (head and tail), unless exec asks for more
KILLED_BY_SIGKILL = (137, -9)


class SandboxError(AgentGymError):
    """The sandbox back end failed (daemon gone, container killed); the episode using it has failed."""


class SandboxFrozen(SandboxError):
    """The sandbox was stopped from outside (SIGSTOP, a freezer) during a command and not resumed within its
    timeout: what the command did is unknown, so the episode has failed (not the agent)."""


class SandboxUnavailable(SandboxError):
    """No usable back end here (no dockerd, no bwrap); the message says why and how to get one."""


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits applied by every back end (as far as it can; see each back end's notes)."""

    memory_mb: int = 1024        # address space (bwrap) / cgroup memory (docker)
    cpus: float = 1.0            # docker only: CPU quota
    pids: int = 256              # processes / threads
    disk_mb: int = 256           # the writable workspace
    tmp_mb: int = 64             # /tmp
    max_file_mb: int = 128       # any single file


@dataclass(frozen=True)
class ExecResult:
    """What one command did: merged stdout/stderr (bounded), exit code, and why it ended."""

    exit_code: int
    output: str
    seconds: float
    timed_out: bool = False
    killed: bool = False         # SIGKILLed without a timeout: memory or pids limit, or the sandbox died
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def describe(self, timeout_s: float | None = None) -> str:
        """The output with a last line saying how the command ended, as the model sees it."""
        text = self.output.rstrip("\n")
        if self.timed_out:
            tail = f"[command timed out after {timeout_s:g} s and was killed]" if timeout_s else \
                "[command timed out and was killed]"
        elif self.killed:
            tail = f"[command killed (exit {self.exit_code}): it ran out of memory or processes]"
        elif self.exit_code != 0:
            tail = f"[exit code {self.exit_code}]"
        else:
            tail = ""
        return "\n".join(p for p in (text, tail) if p) or "[no output]"


@runtime_checkable
class Sandbox(Protocol):
    """One isolated workspace. Paths are relative to /workspace, or absolute inside it."""

    backend: str
    limits: SandboxLimits

    def exec(self, command: str, timeout_s: float = 30.0, cwd: str = ".", max_output: int = MAX_OUTPUT
             ) -> ExecResult: ...
    def read_file(self, path: str) -> bytes: ...
    def write_file(self, path: str, data: bytes | str) -> None: ...
    def list_files(self, path: str = ".") -> list[str]: ...
    def copy_in(self, host_dir: str, dest: str = ".") -> None: ...
    def copy_out(self, src: str, host_dir: str) -> None: ...
    def snapshot(self) -> None: ...
    def reset(self) -> None: ...
    def alive(self) -> bool: ...
    def close(self) -> None: ...


# ----------------------------------------------------------------------------------------------- helpers

def sandbox_env(base: dict[str, str], deps_dir: str | None) -> dict[str, str]:
    """The command environment: `base`, with DEPS_MOUNT first on PYTHONPATH when a deps folder is mounted."""
    return dict(base, PYTHONPATH=DEPS_MOUNT) if deps_dir else dict(base)


def checked_deps_dir(deps_dir: str | None) -> str | None:
    """An absolute deps folder, or SandboxError naming the problem (a missing folder fails here, not in a mount)."""
    if not deps_dir:
        return None
    if not os.path.isdir(deps_dir):
        raise SandboxError(f"the requirements folder {deps_dir!r} does not exist; prepare it again "
                           "(`agentgym swe make-tasks` / `agentgym swe prepare` install it)")
    return os.path.abspath(deps_dir)


def workspace_path(path: str) -> str:
    """`path` as a normalised path relative to the workspace; raises SandboxError if it leaves it."""
    if not isinstance(path, str) or "\x00" in path:
        raise SandboxError(f"bad path {path!r}")
    full = posixpath.normpath(posixpath.join(WORKSPACE, path))
    if full != WORKSPACE and not full.startswith(WORKSPACE + "/"):
        raise SandboxError(f"path {path!r} is outside {WORKSPACE}; use a path inside the workspace")
    return posixpath.relpath(full, WORKSPACE)


def tar_directory(host_dir: str, exclude: tuple[str, ...] = (".git", "__pycache__", ".pytest_cache")) -> bytes:
    """A tar of a host directory's contents (owner fields zeroed), skipping caches and VCS data."""
    if not os.path.isdir(host_dir):
        raise SandboxError(f"{host_dir!r} is not a directory")
    buf = io.BytesIO()

    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if any(part in exclude for part in info.name.split("/")):
            return None
        info.uid = info.gid = 1000
        info.uname = info.gname = ""
        return info

    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in sorted(os.listdir(host_dir)):
            tar.add(os.path.join(host_dir, name), arcname=name, filter=clean)
    return buf.getvalue()


def extract_tar(data: bytes, host_dir: str) -> None:
    """Unpack a tar into a host directory, refusing members that would land outside it."""
    os.makedirs(host_dir, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        tar.extractall(host_dir, filter="data")


def bounded_output(chunks_head: list[bytes], tail: bytes, dropped: int) -> tuple[str, bool]:
    """Join the kept head and tail of a command's output, marking what was cut from the middle."""
    head = b"".join(chunks_head)
    text = head.decode("utf-8", "replace")
    if dropped:
        text += f"\n[... {dropped} bytes of output cut ...]\n" + tail.decode("utf-8", "replace")
    elif tail:
        text += tail.decode("utf-8", "replace")
    return text, bool(dropped)


class OutputBuffer:
    """Keeps the first and last MAX_OUTPUT/2 bytes of a stream of any length."""

    def __init__(self, limit: int = MAX_OUTPUT):
        self.half = limit // 2
        self.head: list[bytes] = []
        self.head_len = 0
        self.tail = b""
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        if self.head_len < self.half:
            take = chunk[: self.half - self.head_len]
            self.head.append(take)
            self.head_len += len(take)
            chunk = chunk[len(take):]
        if chunk:
            joined = self.tail + chunk
            self.dropped += max(0, len(joined) - self.half)
            self.tail = joined[-self.half:]

    def text(self) -> tuple[str, bool]:
        return bounded_output(self.head, self.tail, self.dropped)


def process_stopped(pid: int) -> bool:
    """Whether a live process is stopped (state T: SIGSTOP, SIGTSTP, a cgroup freezer)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] == b"T"
    except (OSError, IndexError):
        return False


def process_start_time(pid: int) -> str | None:
    """The start time of a live process (clock ticks since boot), or None if it is gone.

    Owners are recorded as pid + start time so a reused pid is not mistaken for a live owner.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return fields[19].decode()
    except (OSError, IndexError):
        return None


def owner_tag(pid: int | None = None) -> str:
    """`host:pid:start`, naming this process as the owner of sandboxes it makes."""
    pid = os.getpid() if pid is None else pid
    return f"{os.uname().nodename}:{pid}:{process_start_time(pid)}"


def owner_alive(tag: str) -> bool:
    """Whether the process named by an owner tag still runs (tags from other hosts count as alive)."""
    try:
        host, pid, start = tag.rsplit(":", 2)
        pid_i = int(pid)
    except ValueError:
        return False
    if host != os.uname().nodename:
        return True
    return process_start_time(pid_i) == start


def monotonic() -> float:
    return time.perf_counter()
