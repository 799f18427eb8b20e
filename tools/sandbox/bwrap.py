"""`BwrapSandbox`: a sandbox through bubblewrap, for machines with no Docker daemon.

Each `exec` is one `bwrap` process: new user, pid, net, ipc, uts and cgroup namespaces (so no network,
not even the host's loopback, and no view of host processes), the host's /usr and the interpreter's
prefix bound read-only, a fresh /tmp (tmpfs, size-limited), the workspace bound read-write at
/workspace, and rlimits for memory (address space), processes, file size and open files. The process
group is SIGKILLed at the timeout; bwrap's `--die-with-parent` takes the namespace down with it, and
when a command returns, anything it left in the background dies with its pid namespace.

As root (cgroup v1), each sandbox also gets a pids cgroup: it caps processes where RLIMIT_NPROC cannot (the
sandbox uid maps to root outside), and every process in it is SIGKILLed when a command ends.

The workspace is a host directory under `$AGENTGYM_SANDBOX_DIR` (default /tmp/agentgym-sandbox),
mounted as a size-limited tmpfs when we are root; otherwise only the per-file limit applies. Directory
names carry the owner's pid and start time, so `reap_stale()` removes those of dead owners.
"""
from __future__ import annotations

import functools
import io
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid

from agentgym.tools.sandbox.base import (DEPS_MOUNT, KILLED_BY_SIGKILL, MAX_OUTPUT, WORKSPACE, ExecResult, OutputBuffer,
                                         SandboxError, SandboxFrozen, SandboxLimits, SandboxUnavailable,
                                         checked_deps_dir, monotonic, owner_alive, owner_tag, process_stopped,
                                         sandbox_env, tar_directory, workspace_path)

ROOT = os.environ.get("AGENTGYM_SANDBOX_DIR", os.path.join(tempfile.gettempdir(), "agentgym-sandbox"))
SANDBOX_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": WORKSPACE, "LANG": "C.UTF-8", "TMPDIR": "/tmp",
               "PYTHONDONTWRITEBYTECODE": "1", "USER": "agent"}
_reaped = False


@functools.lru_cache(maxsize=1)
def bwrap_problem() -> str | None:
    """Why bwrap cannot run sandboxes here, or None if it can (tried once for real)."""
    exe = shutil.which("bwrap")
    if exe is None:
        return "bubblewrap is not installed (apt-get install -y bubblewrap)"
    try:
        probe = subprocess.run([exe, "--unshare-all", "--unshare-user", "--ro-bind", "/", "/", "true"],
                               capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap failed to start: {exc}"
    if probe.returncode != 0:
        return f"bwrap cannot create namespaces here: {probe.stderr.strip()[:200]} (enable unprivileged user namespaces)"
    return None


def _system_binds() -> list[str]:
    """Read-only binds for the interpreter: /usr (+ merged-/usr symlinks) and the Python prefix if elsewhere."""
    args: list[str] = ["--ro-bind", "/usr", "/usr"]
    for top in ("bin", "sbin", "lib", "lib64", "lib32"):
        path = f"/{top}"
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    prefix = os.path.realpath(sys.base_prefix)  # not a venv's prefix: its site-packages stay out
    if not prefix.startswith("/usr"):
        args += ["--ro-bind", prefix, prefix]
    for path in ("/etc/ld.so.cache", "/etc/alternatives", "/etc/localtime"):
        if os.path.exists(path):
            args += ["--ro-bind", path, path]
    return args


def _python_bin_dir() -> str:
    """A PATH entry whose python3 is the host interpreter (with pytest), first on the sandbox's PATH."""
    return os.path.join(os.path.realpath(sys.base_prefix), "bin")


def reap_stale(root: str = ROOT) -> int:
    """Remove the workspaces of owners that are gone (a killed parent); returns how many."""
    removed = 0
    if os.path.isdir(CGROUP_ROOT):
        for name in os.listdir(CGROUP_ROOT):
            path = os.path.join(CGROUP_ROOT, name)
            if os.path.isdir(path) and not owner_alive(name.rsplit("_", 1)[0].replace("_", ":")):
                _remove_cgroup(path)
    if not os.path.isdir(root):
        return removed
    for name in os.listdir(root):
        owner = name.rsplit("_", 1)[0].replace("_", ":")
        if owner_alive(owner):
            continue
        _remove_dir(os.path.join(root, name))
        removed += 1
    return removed


def _remove_dir(path: str) -> None:
    workspace = os.path.join(path, "ws")
    if os.path.ismount(workspace):
        subprocess.run(["umount", "-l", workspace], capture_output=True)
    shutil.rmtree(path, ignore_errors=True)
    _remove_cgroup(os.path.join(CGROUP_ROOT, os.path.basename(path)))


# A pids cgroup per sandbox (when we are root and cgroup v1's pids controller is there). RLIMIT_NPROC does not
# hold a fork bomb when the sandbox uid maps to root outside, and the cgroup also lets a timeout kill every
# process of the sandbox, wherever in the tree it is.
CGROUP_ROOT = "/sys/fs/cgroup/pids/agentgym-sandbox"


def _make_cgroup(name: str, pids: int) -> str | None:
    if os.geteuid() != 0 or not os.path.isdir(os.path.dirname(CGROUP_ROOT)):
        return None
    path = os.path.join(CGROUP_ROOT, name)
    try:
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "pids.max"), "w") as fh:
            fh.write(str(pids))
    except OSError:
        return None
    return path


def _cgroup_pids(path: str) -> list[int]:
    try:
        with open(os.path.join(path, "cgroup.procs")) as fh:
            return [int(x) for x in fh.read().split()]
    except OSError:
        return []


def _kill_cgroup(path: str, wait_s: float = 30.0) -> None:
    """SIGKILL every process in the cgroup until it is empty (bounded)."""
    deadline = time.monotonic() + wait_s
    while (pids := _cgroup_pids(path)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)


def _remove_cgroup(path: str) -> None:
    if os.path.isdir(path):
        _kill_cgroup(path)
        try:
            os.rmdir(path)
        except OSError:
            pass


class BwrapSandbox:
    """A bubblewrap sandbox: see the module docstring for what is isolated and how."""

    backend = "bwrap"

    def __init__(self, limits: SandboxLimits | None = None, deps_dir: str | None = None):
        global _reaped
        problem = bwrap_problem() if not _reaped else None
        if problem:
            raise SandboxUnavailable(problem)
        if not _reaped:
            reap_stale()
            _reaped = True
        self.limits = limits or SandboxLimits()
        self.deps_dir = checked_deps_dir(deps_dir)
        os.makedirs(ROOT, mode=0o755, exist_ok=True)
        self.dir = os.path.join(ROOT, f"{owner_tag().replace(':', '_')}_{uuid.uuid4().hex[:8]}")
        self.workspace = os.path.join(self.dir, "ws")
        os.makedirs(self.workspace)
        self.disk_limited = self._mount_tmpfs()
        self.cgroup = _make_cgroup(os.path.basename(self.dir), self.limits.pids)
        self._write_identity()
        self._base_args = self._bwrap_args()
        self._prlimit = shutil.which("prlimit") or "prlimit"
        self._snapshot: bytes | None = None
        self._running: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self._closed = False

    # ------------------------------------------------------------------ setup
    def _mount_tmpfs(self) -> bool:
        if os.geteuid() != 0:
            return False
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.limits.disk_mb}m,mode=0755",
                               "agentgym-sandbox", self.workspace], capture_output=True)
        return done.returncode == 0

    def _write_identity(self) -> None:
        with open(os.path.join(self.dir, "passwd"), "w") as fh:
            fh.write(f"agent:x:1000:1000::{WORKSPACE}:/bin/bash\n")
        with open(os.path.join(self.dir, "group"), "w") as fh:
            fh.write("agent:x:1000:\n")

    def _bwrap_args(self) -> list[str]:
        env = sandbox_env(dict(SANDBOX_ENV, PATH=f"{_python_bin_dir()}:{SANDBOX_ENV['PATH']}"), self.deps_dir)
        deps = ["--ro-bind", self.deps_dir, DEPS_MOUNT] if self.deps_dir else []
        args = ["bwrap", "--unshare-all", "--unshare-user", "--uid", "1000", "--gid", "1000", "--hostname", "sandbox",
                "--die-with-parent", "--new-session", *_system_binds(),
                "--ro-bind", os.path.join(self.dir, "passwd"), "/etc/passwd",
                "--ro-bind", os.path.join(self.dir, "group"), "/etc/group",
                "--proc", "/proc", "--dev", "/dev",
                "--size", str(self.limits.tmp_mb * 2**20), "--tmpfs", "/tmp",
                "--bind", self.workspace, WORKSPACE, *deps, "--remount-ro", "/", "--clearenv"]
        for key, value in env.items():
            args += ["--setenv", key, value]
        return args

    def _rlimit_prefix(self) -> list[str]:
        """`prlimit` in front of bwrap: rlimits are inherited by the whole tree (and, unlike a preexec
        function, this lets Python spawn with vfork, which is ~15 ms faster per command)."""
        mb = 2**20
        return [self._prlimit, f"--as={self.limits.memory_mb * mb}", f"--nproc={self.limits.pids}",
                f"--fsize={self.limits.max_file_mb * mb}", "--nofile=1024", "--core=0", "--"]

    # ------------------------------------------------------------------ commands
    def exec(self, command: str, timeout_s: float = 30.0, cwd: str = ".",
             max_output: int = MAX_OUTPUT) -> ExecResult:
        self._check_open()
        inside = os.path.join(WORKSPACE, workspace_path(cwd))
        argv = [*self._rlimit_prefix(), *self._base_args, "--chdir", inside, "bash", "-c", command]
        if self.cgroup:  # join the sandbox's cgroup before exec, so every descendant is counted and killable
            argv = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', self.cgroup, *argv]
        start = monotonic()
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        except (OSError, subprocess.SubprocessError) as exc:
            raise SandboxError(f"bwrap failed to start: {exc}") from exc
        with self._lock:
            self._running.add(proc)
        buffer = OutputBuffer(max_output)
        reader = threading.Thread(target=self._drain, args=(proc, buffer), daemon=True)
        reader.start()
        timed_out = frozen = False
        try:
            proc.wait(timeout=max(0.01, timeout_s))
        except subprocess.TimeoutExpired:
            timed_out = True
            # bwrap runs outside the command's pid namespace: only something outside the sandbox can stop it
            frozen = process_stopped(proc.pid)
            self._kill(proc)
            proc.wait()
        finally:
            with self._lock:
                self._running.discard(proc)
        if self.cgroup:  # whatever the command left behind dies with it (a namespace's init may be slow to)
            _kill_cgroup(self.cgroup)
        # The pipe closes once every process holding it is gone: a pid namespace full of a fork bomb's
        # children takes a moment to die, and we wait for it rather than return with them alive.
        reader.join(60.0)
        if frozen:
            raise SandboxFrozen(f"the sandbox was stopped from outside (SIGSTOP) during a command and not resumed "
                                f"within its {timeout_s:g} s timeout; its processes were killed and what the command "
                                "did is unknown")
        output, truncated = buffer.text()
        code = proc.returncode if proc.returncode is not None else -9
        if code < 0:  # bwrap itself was signalled
            code = 128 - code
        killed = code in KILLED_BY_SIGKILL and not timed_out
        if output.startswith("bwrap: ") and code == 1:
            raise SandboxError(f"bwrap refused to run: {output.strip()[:300]}")
        return ExecResult(code, output, monotonic() - start, timed_out, killed, truncated)

    @staticmethod
    def _drain(proc: subprocess.Popen, buffer: OutputBuffer) -> None:
        assert proc.stdout is not None
        while True:
            chunk = proc.stdout.read1(65536)
            if not chunk:
                break
            buffer.add(chunk)
        proc.stdout.close()

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    # ------------------------------------------------------------------ files (host side, symlink-safe)
    def _host_path(self, path: str, must_exist: bool = True) -> str:
        rel = workspace_path(path)
        root = os.path.realpath(self.workspace)
        full = os.path.join(root, rel) if rel != "." else root
        real = os.path.realpath(full)
        if real != root and not real.startswith(root + os.sep):
            raise SandboxError(f"path {path!r} resolves outside the workspace")
        if must_exist and not os.path.exists(real):
            raise SandboxError(f"no such file or directory: {path!r}")
        return real

    def read_file(self, path: str) -> bytes:
        self._check_open()
        real = self._host_path(path)
        if os.path.isdir(real):
            raise SandboxError(f"{path!r} is a directory")
        with open(real, "rb") as fh:
            return fh.read()

    def write_file(self, path: str, data: bytes | str) -> None:
        self._check_open()
        parent = self._host_path(os.path.dirname(workspace_path(path)) or ".", must_exist=False)
        os.makedirs(parent, exist_ok=True)
        target = os.path.join(parent, os.path.basename(workspace_path(path)))
        raw = data.encode() if isinstance(data, str) else data
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        except OSError as exc:
            raise SandboxError(f"cannot write {path!r}: {exc.strerror}") from exc
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(raw)
        except OSError as exc:  # ENOSPC at the workspace limit
            raise SandboxError(f"cannot write {path!r}: {exc.strerror}") from exc

    def list_files(self, path: str = ".") -> list[str]:
        self._check_open()
        root = self._host_path(path)
        base = os.path.realpath(self.workspace)
        found = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", ".pytest_cache"))
            found += [os.path.relpath(os.path.join(dirpath, f), base) for f in filenames]
        return sorted(found)

    def copy_in(self, host_dir: str, dest: str = ".") -> None:
        self._check_open()
        target = self._host_path(dest, must_exist=False)
        with tarfile.open(fileobj=io.BytesIO(tar_directory(host_dir)), mode="r") as tar:
            try:
                tar.extractall(target, filter="data")
            except OSError as exc:
                raise SandboxError(f"copy into the workspace failed: {exc}") from exc

    def copy_out(self, src: str, host_dir: str) -> None:
        self._check_open()
        shutil.copytree(self._host_path(src), host_dir, symlinks=True, dirs_exist_ok=True)

    def snapshot(self) -> None:
        self._check_open()
        self._snapshot = tar_directory(self.workspace, exclude=())

    def reset(self) -> None:
        self._check_open()
        self._kill_running()
        for name in os.listdir(self.workspace):
            path = os.path.join(self.workspace, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.unlink(path)
        if self._snapshot is not None:
            with tarfile.open(fileobj=io.BytesIO(self._snapshot), mode="r") as tar:
                tar.extractall(self.workspace, filter="data")

    def alive(self) -> bool:
        return not self._closed and os.path.isdir(self.workspace)

    # ------------------------------------------------------------------ teardown
    def _kill_running(self) -> None:
        with self._lock:
            running = list(self._running)
        for proc in running:
            self._kill(proc)

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxError("the sandbox is closed")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._kill_running()
        _remove_dir(self.dir)

    def __enter__(self) -> "BwrapSandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
