"""Env servers on other hosts, for real: each test host is a network namespace joined to this one by a veth
pair with a private /30 (10.203.X.0/30, 10.203.X.4/30, ... on those veths only; nothing leaves the machine).
`agentgym serve env` runs inside the namespaces; evaluation and a short training run play them from here.
Then faults: a server killed mid-episode fails only its episodes, a hung (SIGSTOPped) server times out per
step while the other host's episodes finish, and a bounded load of concurrent sessions with hostile strings
is answered in full, each reply equal to the same env played in-process.

Skipped, with the reason, where network namespaces cannot be made (not root, no `ip`, no CAP_NET_ADMIN).
"""
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import httpx
import pytest

import agentgym
from agentgym.checker import GARBAGE_ACTIONS
from agentgym.policies.scripted import OraclePolicy
from agentgym.engine.rollout import RolloutConfig, rollout
from agentgym.engine.vector import make_pool

pytestmark = pytest.mark.slow
KEYDOOR, ONEWORD = "agentgym/Toy-KeyDoor-v0", "agentgym/Toy-KeyDoor-OneWord-v0"
PORT = 8020


@dataclass
class Host:
    ns: str
    veth: str
    host_ip: str    # this namespace's end of the veth
    ip: str         # the test host's address
    procs: list


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=20)


def _free_subnet() -> int:
    taken = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, timeout=20).stdout
    for x in random.Random(os.getpid()).sample(range(1, 255), 254):
        if f"10.203.{x}." not in taken:
            return x
    pytest.skip("no free 10.203.X.0/24 on this machine for the test hosts")


def _make_hosts(n: int) -> list[Host]:
    tag, x = f"{os.getpid() % 100000}", _free_subnet()
    hosts = []
    for i in range(n):
        host = Host(f"agtest{tag}h{i}", f"agv{tag}{i}", f"10.203.{x}.{4 * i + 1}", f"10.203.{x}.{4 * i + 2}", [])
        hosts.append(host)
        _ip("netns", "add", host.ns)
        _ip("link", "add", host.veth, "type", "veth", "peer", "name", f"agp{tag}{i}", "netns", host.ns)
        _ip("addr", "add", f"{host.host_ip}/30", "dev", host.veth)
        _ip("link", "set", host.veth, "up")
        _ip("-n", host.ns, "addr", "add", f"{host.ip}/30", "dev", f"agp{tag}{i}")
        _ip("-n", host.ns, "link", "set", f"agp{tag}{i}", "up")
        _ip("-n", host.ns, "link", "set", "lo", "up")
    return hosts


def _remove_hosts(hosts: list[Host]) -> None:
    for host in hosts:
        for proc in host.procs:
            _kill(proc)
        subprocess.run(["ip", "netns", "del", host.ns], capture_output=True, timeout=20)   # takes its veth end
        subprocess.run(["ip", "link", "del", host.veth], capture_output=True, timeout=20)


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def hosts():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2's `ip`")
    made: list[Host] = []
    try:
        try:
            made.extend(_make_hosts(2))
        except subprocess.CalledProcessError as exc:
            pytest.skip(f"cannot make network namespaces here: {' '.join(exc.cmd)}: {exc.stderr.strip()}")
        yield made
    finally:
        _remove_hosts(made)


def serve(host: Host, env_id: str, tmp_path, kwargs: str = "{}", *extra: str) -> str:
    """Start `agentgym serve env` inside the host's namespace; return its URL once /health answers."""
    cmd = ["ip", "netns", "exec", host.ns, sys.executable, "-m", "agentgym", "serve", "env", env_id,
           "--host", host.ip, "--port", str(PORT), "--kwargs", kwargs, *extra]
    log = open(tmp_path / f"{host.ns}.log", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    host.procs.append(proc)
    url, deadline = f"http://{host.ip}:{PORT}", time.monotonic() + 90
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the server in {host.ns} exited: {(tmp_path / f'{host.ns}.log').read_text()}")
        try:
            if httpx.get(f"{url}/health", timeout=1, trust_env=False).json()["env_id"] == env_id:
                return url
        except httpx.HTTPError:
            time.sleep(0.2)
    raise AssertionError(f"the server in {host.ns} did not answer /health within 90 s")


@pytest.fixture
def servers(hosts, tmp_path):
    """Start servers on the test hosts for one test; stop them after it."""
    yield lambda i, env_id, kwargs="{}", *extra: serve(hosts[i], env_id, tmp_path, kwargs, *extra)
    for host in hosts:
        while host.procs:
            _kill(host.procs.pop())


def test_eval_across_hosts(servers, tmp_path):
    keydoor, household = servers(0, KEYDOOR), servers(1, "agentgym/Household-v0")
    out = tmp_path / "eval"
    done = subprocess.run([sys.executable, "-m", "agentgym", "eval", "--policy", "oracle", "--env",
                           f"remote:{keydoor}/{KEYDOOR}", f"remote:{household}/agentgym/Household-v0",
                           "--episodes", "4", "--out", str(out), "--no-progress"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    trajectories = json.loads((out / "results.json").read_text())["trajectories"]
    assert len(trajectories) == 8
    assert all(r["trajectory"]["success"] for r in trajectories), [r["trajectory"].get("error") for r in trajectories]


def test_train_across_hosts(servers, tmp_path):
    url = servers(0, ONEWORD, '{"length": 2, "key_bonus": 0.5, "key_at_start": true}')
    run_dir = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "agentgym", "train", "toy_learning",
                           f"rollout.env=remote:{url}/{ONEWORD}", "rollout.env_kwargs={}", "rollout.groups=4",
                           "rollout.group_size=4", "train.iterations=2", "eval.every=0", f"train.run_dir={run_dir}"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert len([r for r in rows if "iteration" in r]) >= 2


class _Alternate:
    """A factory that makes envs on host A and host B in turn (the pool calls it from several threads)."""

    def __init__(self, urls, **kwargs):
        self.urls, self.kwargs, self.n, self.lock = urls, kwargs, 0, threading.Lock()

    def __call__(self):
        with self.lock:
            url, self.n = self.urls[self.n % len(self.urls)], self.n + 1
        return agentgym.make(f"remote:{url}/{KEYDOOR}", **self.kwargs)


def _run_with_fault(urls, fault, **env_kwargs):
    """Oracle rollouts of 8 episodes spread over two hosts; `fault()` runs before the second turn's actions."""
    turns = {"n": 0}
    oracle = OraclePolicy()
    class Faulty(type(oracle)):
        def generate(self, requests):
            turns["n"] += 1
            if turns["n"] == 2:
                fault()
            return super().generate(requests)

    pool = make_pool(_Alternate(urls, **env_kwargs), 8, "thread", workers=8)
    placed = [env.unwrapped.url for env in pool.envs]   # slot i plays seed i (group_size 1)
    try:
        t0 = time.perf_counter()
        trajs = rollout(pool, Faulty(), None, seeds=list(range(8)), config=RolloutConfig(executor="thread"))
        return trajs, placed, time.perf_counter() - t0
    finally:
        pool.close()


def test_a_server_killed_mid_episode_fails_only_its_episodes(servers, hosts):
    urls = [servers(0, KEYDOOR), servers(1, KEYDOOR)]
    trajs, placed, _ = _run_with_fault(urls, lambda: hosts[1].procs[-1].kill())
    on_b = [t for t, url in zip(trajs, placed) if url == urls[1]]
    on_a = [t for t, url in zip(trajs, placed) if url == urls[0]]
    assert len(on_a) == len(on_b) == 4
    assert all(t.success for t in on_a)
    assert all(t.end_reason == "failed" and "RemoteEnvError" in (t.error or "") for t in on_b), \
        [t.error for t in on_b]
    assert all(len(t.turns) == 1 for t in on_b)   # the first turn was played before the kill


def test_a_hung_server_times_out_per_step_without_stalling_the_other(servers, hosts):
    urls = [servers(0, KEYDOOR), servers(1, KEYDOOR)]
    trajs, placed, wall = _run_with_fault(urls, lambda: hosts[1].procs[-1].send_signal(signal.SIGSTOP),
                                          step_timeout_s=3.0)
    on_b = [t for t, url in zip(trajs, placed) if url == urls[1]]
    assert all(t.success for t, url in zip(trajs, placed) if url == urls[0])
    assert all(t.end_reason == "failed" and "timed out" in (t.error or "") for t in on_b), [t.error for t in on_b]
    assert wall < 60   # a hang guard: each hung step gives up after 3 s, concurrently


def test_bounded_load_with_hostile_strings_loses_nothing(servers):
    url = servers(0, KEYDOOR, "{}", "--max-concurrent", "8")
    hostile = [text for _, text in GARBAGE_ACTIONS if len(text) < 300_000] + ["left", "right", "take key"]
    mismatches, errors = [], []

    def client(worker: int) -> None:
        rng = random.Random(worker)
        remote, local = agentgym.make(f"remote:{url}/{KEYDOOR}"), agentgym.make(KEYDOOR)
        try:
            for episode in range(3):
                if remote.reset(seed=worker * 10 + episode) != local.reset(seed=worker * 10 + episode):
                    mismatches.append((worker, "reset"))
                for _ in range(12):
                    action = rng.choice(hostile)
                    got, want = remote.step(action), local.step(action)
                    if got != want:
                        mismatches.append((worker, action[:40]))
                    if want[2] or want[3]:
                        break
        except Exception as exc:
            errors.append(f"{worker}: {type(exc).__name__}: {exc}")
        finally:
            remote.close()

    threads = [threading.Thread(target=client, args=(w,)) for w in range(48)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not errors and not mismatches, (errors[:3], mismatches[:3])
    health = httpx.get(f"{url}/health", timeout=5, trust_env=False).json()
    assert health["status"] == "ok" and health["sessions"] == 0
