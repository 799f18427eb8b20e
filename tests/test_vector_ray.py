"""The Ray env pool on a real local cluster: `ray start --head` on loopback plus a second worker node."""
from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.ray
ray = pytest.importorskip("ray")

from agentgym.engine.vector import EnvFailure, make_pool  # noqa: E402

KEYDOOR = "agentgym/Toy-KeyDoor-v0"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ray_cli() -> list[str]:
    exe = shutil.which("ray", path=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    return [exe] if exe else [sys.executable, "-m", "ray.scripts.scripts"]


def _own_auth_token(folder: Path, env: pytest.MonkeyPatch):
    """Points the nodes started below and this process's driver at a token file of the cluster's own; returns
    what reloads the driver's auth settings once `env` is undone.

    With nothing set, each `ray start` and ray.init read ~/.ray/auth_token, and a token there that changed between
    them (another Ray run on the machine) fails the join or the connect with "Unauthenticated". The driver caches
    its auth settings, so they are reloaded here (Ray's own test helper does the same)."""
    try:
        from ray._private.authentication_test_utils import reset_auth_token_state
    except ImportError:  # a Ray without token authentication
        return lambda: None
    token = folder / "auth_token"
    token.write_text(secrets.token_hex(32))
    env.setenv("RAY_AUTH_MODE", "token")
    env.setenv("RAY_AUTH_TOKEN_PATH", str(token))
    reset_auth_token_state()
    return reset_auth_token_state


def _wait_until_dead(actor, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            ray.get(actor.node_id.remote(), timeout=10)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.2)
    raise AssertionError(f"the killed actor still answered after {timeout:.0f} s")


@pytest.fixture(scope="module")
def cluster():
    port = _free_port()
    # a short folder: Ray's socket paths go under it and must fit AF_UNIX's 107 bytes (pytest's own temp folder,
    # with xdist's popen-gwN level, made them too long)
    tmp = Path(tempfile.mkdtemp(prefix="agr-"))
    auth_env = pytest.MonkeyPatch()
    reload_auth = _own_auth_token(tmp, auth_env)
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    common = ["--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--disable-usage-stats"]
    address = f"127.0.0.1:{port}"
    try:
        subprocess.run([*_ray_cli(), "start", "--head", "--port", str(port), "--include-dashboard=false",
                        f"--temp-dir={tmp}", *common], check=True, env=env, capture_output=True, timeout=120)
        subprocess.run([*_ray_cli(), "start", "--address", address, *common], check=True, env=env,
                       capture_output=True, timeout=120)
        if ray.is_initialized():  # an earlier test's local session (test_vector.py)
            ray.shutdown()
        ray.init(address=address, log_to_driver=False)
        deadline = time.time() + 60
        while len([n for n in ray.nodes() if n["Alive"]]) < 2 and time.time() < deadline:
            time.sleep(0.5)
        yield address
    finally:
        ray.shutdown()
        subprocess.run([*_ray_cli(), "stop", "--force"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)
        auth_env.undo()
        reload_auth()


def test_envs_spread_over_both_nodes_and_step(cluster):
    assert len([n for n in ray.nodes() if n["Alive"]]) == 2
    with make_pool(KEYDOOR, 4, "ray", workers=2, ray_address=cluster) as pool:
        assert len(set(pool.nodes())) == 2
        resets = pool.reset([(i, i, None) for i in range(4)])
        assert all(not isinstance(r, EnvFailure) for r in resets)
        steps = pool.step([(i, "garbage") for i in range(4)])
        assert all(not isinstance(s, EnvFailure) for s in steps)
        assert all(s.info.get("valid_action") is False for s in steps)


def test_a_killed_actor_fails_its_episodes_and_is_replaced(cluster):
    with make_pool(KEYDOOR, 4, "ray", workers=2, ray_address=cluster) as pool:
        pool.reset([(i, i, None) for i in range(4)])
        ray.kill(pool.actors[1])
        _wait_until_dead(pool.actors[1])  # the kill is asynchronous: a step sent at once could still be served
        steps = pool.step([(i, "look") for i in range(4)])
        failed = [i for i, s in enumerate(steps) if isinstance(s, EnvFailure)]
        assert failed == [1, 3]          # env i lives in actor i % 2
        assert "ray actor 1 failed" in steps[1].message
        assert pool.replaced == 1
        again = pool.reset([(1, 7, None), (3, 8, None)])  # the replacement actor serves them again
        assert all(not isinstance(r, EnvFailure) for r in again)
