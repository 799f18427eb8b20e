"""Sandboxes that run untrusted code for envs: one `Sandbox` protocol, two real back ends.

    from agentgym.tools.sandbox import make_sandbox
    with make_sandbox("auto") as box:          # docker if a daemon and the image are there, else bwrap
        box.copy_in("path/to/repo")
        print(box.exec("python3 -m pytest -q", timeout_s=60).describe())

`DockerSandbox` (Docker SDK, `agentgym[swe]`) and `BwrapSandbox` (bubblewrap, no daemon) are imported
only when used, so this package is light.
"""
from __future__ import annotations

import atexit

from agentgym.tools.sandbox.base import (DEPS_MOUNT, LABEL, WORKSPACE, ExecResult, Sandbox, SandboxError, SandboxFrozen,
                                         SandboxLimits, SandboxUnavailable)

BACKENDS = ("docker", "bwrap")
__all__ = ["BACKENDS", "DEPS_MOUNT", "LABEL", "WORKSPACE", "ExecResult", "Sandbox", "SandboxError", "SandboxFrozen",
           "SandboxLimits", "SandboxUnavailable", "backend_problem", "close_pools", "make_sandbox", "pick_backend", "sandbox_pool"]
_pools: dict[tuple, object] = {}


def backend_problem(backend: str, image: str | None = None) -> str | None:
    """Why a back end cannot run here, or None if it can."""
    if backend == "docker":
        from agentgym.tools.sandbox.docker import DEFAULT_IMAGE, docker_problem

        return docker_problem(image or DEFAULT_IMAGE)
    if backend == "bwrap":
        from agentgym.tools.sandbox.bwrap import bwrap_problem

        return bwrap_problem()
    raise SandboxError(f"unknown sandbox backend {backend!r}; choose one of auto, {', '.join(BACKENDS)}")


def pick_backend(backend: str = "auto", image: str | None = None) -> str:
    """`auto` -> docker when usable, else bwrap; raises SandboxUnavailable with every reason otherwise."""
    if backend != "auto":
        problem = backend_problem(backend, image)
        if problem:
            raise SandboxUnavailable(f"{backend} sandbox unavailable: {problem}")
        return backend
    reasons = []
    for name in BACKENDS:
        problem = backend_problem(name, image)
        if problem is None:
            return name
        reasons.append(f"{name}: {problem}")
    raise SandboxUnavailable("no sandbox back end available (" + "; ".join(reasons) + ")")


def make_sandbox(backend: str = "auto", image: str | None = None, limits: SandboxLimits | None = None,
                 deps_dir: str | None = None) -> Sandbox:
    """A fresh sandbox from the chosen back end (`auto`, `docker` or `bwrap`); `deps_dir`: a host folder of
    Python packages mounted read-only at DEPS_MOUNT and put on PYTHONPATH (a repository's test requirements)."""
    return sandbox_pool(backend, image, limits, size=0, deps_dir=deps_dir).acquire()


def sandbox_pool(backend: str = "auto", image: str | None = None, limits: SandboxLimits | None = None,
                 size: int = 2, deps_dir: str | None = None):
    """A process-wide pool per (back end, image, limits, deps folder): docker keeps `size` warm containers."""
    name = pick_backend(backend, image)
    key = (name, image, limits, size, deps_dir or None)
    if key not in _pools:
        if name == "docker":
            from agentgym.tools.sandbox.docker import DEFAULT_IMAGE, DockerPool

            _pools[key] = DockerPool(image or DEFAULT_IMAGE, limits, size=size, deps_dir=deps_dir)
        else:
            _pools[key] = _BwrapPool(limits, deps_dir)
        if len(_pools) == 1:
            atexit.register(close_pools)
    return _pools[key]


def close_pools() -> None:
    """Remove every pooled sandbox of this process (also run at exit)."""
    for pool in list(_pools.values()):
        try:
            pool.close()
        except Exception:
            pass
    _pools.clear()


class _BwrapPool:
    """bwrap needs no warm pool (a sandbox is a directory); same interface as DockerPool."""

    def __init__(self, limits: SandboxLimits | None, deps_dir: str | None = None):
        self.limits, self.deps_dir = limits, deps_dir

    def acquire(self):
        from agentgym.tools.sandbox.bwrap import BwrapSandbox

        return BwrapSandbox(self.limits, deps_dir=self.deps_dir)

    def release(self, sandbox) -> None:
        sandbox.close()

    def close(self) -> None:
        pass
