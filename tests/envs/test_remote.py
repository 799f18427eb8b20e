"""`agentgym serve env` and `remote:URL/ID` on loopback: the wire format, the contract through the checker,
the server's limits and errors, per-step timeouts, and the CLI as a real subprocess."""
import json
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import pytest

import agentgym
from agentgym.checker import check_env
from agentgym.core import TextEnv, make_info
from agentgym.envs.remote.server import EnvServer
from agentgym.envs.remote.service import EnvService, ServiceConfig
from agentgym.envs.remote.wire import decode, encode
from agentgym.errors import ConfigError, RegistrationError, RemoteEnvError
from agentgym.registration import remote_alias
from agentgym.toolcalls import ToolResult

KEYDOOR = "agentgym/Toy-KeyDoor-v0"


@pytest.mark.parametrize("value", [
    "plain", ("room", 3, ("nested", None)), frozenset({"a", ("b", 1)}), b"\x00\xffbytes", 1.5, True, None,
    "\ud800 lone surrogate", {"k": [1, (2, 3)]}, {1: "int key", ("t",): "tuple key"}, {"__agentgym_tuple__": "x"},
    ToolResult("calc", "42", True, {"expression": "6*7"}, 0.25), [{"a": frozenset()}],
])
def test_wire_round_trip_keeps_values_equal_and_hashable(value):
    back = decode(json.loads(json.dumps(encode(value))))
    assert back == value and type(back) is type(value)
    if isinstance(value, (str, tuple, frozenset, bytes)):
        assert hash(back) == hash(value)


def test_wire_numpy_scalars_and_unknown_objects():
    assert decode(encode(np.float32(0.5))) == 0.5 and decode(encode(np.int64(7))) == 7
    odd = decode(json.loads(json.dumps(encode(object))))
    assert isinstance(odd, tuple) and hash(odd) and odd == decode(json.loads(json.dumps(encode(object))))


def test_remote_alias():
    assert remote_alias("remote:http://10.0.0.2:8020/agentgym/Toy-KeyDoor-v0") == {
        "url": "http://10.0.0.2:8020", "env_id": KEYDOOR}
    assert remote_alias(KEYDOOR) is None
    for bad in ("remote:10.0.0.2:8020/x", "remote:http://host", "remote:ftp://h/x-v0", "remote:http:///x"):
        with pytest.raises(RegistrationError, match="remote:http://HOST:PORT/ENV_ID"):
            remote_alias(bad)
    assert agentgym.spec("remote:http://127.0.0.1:1/a/B-v0").kwargs["env_id"] == "a/B-v0"


@pytest.mark.parametrize("env_id", [KEYDOOR, "agentgym/Toy-Calculator-v0", "agentgym/Household-v0"])
def test_check_env_passes_through_the_server(env_id):
    report = check_env("agentgym/Remote-v0", seeds=(0, 1), env_id=env_id)
    assert {"determinism", "any string", "oracle", "snapshot", "close"} <= set(report.checks)


@pytest.fixture
def served():
    servers = []

    def start(env_id=KEYDOOR, make_env=None, **limits):
        server = EnvServer(EnvService(env_id, config=ServiceConfig(**limits), make_env=make_env)).start()
        servers.append(server)
        return server
    yield start
    for server in servers:
        server.close()


def test_remote_url_id_plays_like_the_local_env(served):
    server = served()
    remote = agentgym.make(f"remote:{server.url}/{KEYDOOR}")
    local = agentgym.make(KEYDOOR)
    assert remote.unwrapped.max_turns == 10 and remote.unwrapped.instructions == local.unwrapped.instructions
    assert remote.reset(seed=3) == local.reset(seed=3)
    for action in ("left", "right", "take key", "florp", "open door", "left"):
        assert remote.step(action) == local.step(action)
    remote.close()
    assert server.service.health()["sessions"] == 0


def test_trajectories_name_the_served_env(served):
    from agentgym.policies.scripted import OraclePolicy
    from agentgym.engine.rollout import rollout

    env_id = f"remote:{served().url}/{KEYDOOR}"
    trajs = rollout(env_id, OraclePolicy(), None, seeds=[0, 1])
    assert [t.env_id for t in trajs] == [env_id, env_id] and all(t.success for t in trajs)


def test_wrong_env_id_and_dead_url_are_one_line_errors(served):
    server = served()
    with pytest.raises(ConfigError, match="serves 'agentgym/Toy-KeyDoor-v0'"):
        agentgym.make(f"remote:{server.url}/agentgym/Household-v0")
    with pytest.raises(RemoteEnvError, match="is the env server running"):
        agentgym.make("remote:http://127.0.0.1:9/" + KEYDOOR, connect_timeout_s=2)


def test_http_errors_are_json_with_a_message(served):
    server = served()
    with httpx.Client(base_url=server.url) as http:
        assert http.get("/health").json()["status"] == "ok"
        assert http.get("/openapi.json").json()["paths"]["/sessions/{session_id}/step"]
        sid = http.post("/sessions", json={}).json()["session_id"]
        cases = [("POST", f"/sessions/{sid}/step", b'{"action": "left"}', 409, "reset first"),
                 ("POST", f"/sessions/{sid}/reset", b'{"seed": 0}', 200, ""),
                 ("POST", f"/sessions/{sid}/step", b"{not json", 400, "bad_json"),
                 ("POST", f"/sessions/{sid}/reset", b"\t", 400, "bad_json"),
                 ("POST", f"/sessions/{sid}/reset", b"", 200, ""),
                 ("POST", f"/sessions/{sid}/step", b'{"action": 5}', 400, "action must be a string"),
                 ("POST", f"/sessions/{sid}/reset", b'{"seed": -1}', 400, "seed must be"),
                 ("POST", f"/sessions/{'0' * 32}/step", b'{"action": "x"}', 404, "no session"),
                 ("GET", f"/sessions/{sid}/step", b"", 405, "use POST"),
                 ("POST", "/nowhere", b"", 404, "openapi.json"),
                 ("POST", "/sessions", b'{"kwargs": {}}', 400, "fixed kwargs"),
                 ("POST", f"/sessions/{sid}/restore", b'{"snapshot": "QUJD"}', 403, "bad signature"),
                 ("POST", f"/sessions/{sid}/restore", b'{"snapshot": "\\u00e9"}', 403, "base64")]
        for method, path, body, status, fragment in cases:
            reply = http.request(method, path, content=body)
            assert reply.status_code == status, (path, reply.text)
            assert status == 200 or fragment in json.dumps(reply.json()["error"]), reply.text


def test_body_limit_session_limit_and_busy_session(served):
    server = served(max_sessions=2, max_body_bytes=1000)
    with httpx.Client(base_url=server.url) as http:
        sid = http.post("/sessions", json={}).json()["session_id"]
        assert http.post(f"/sessions/{sid}/step", json={"action": "x" * 2000}).status_code == 413
        http.post("/sessions", json={})
        full = http.post("/sessions", json={})
        assert full.status_code == 503 and "sessions are open" in full.json()["error"]["message"]
        assert http.get("/health").json()["sessions"] == 2


class _SlowEnv(TextEnv):
    """Sleeps `delay` seconds in step when the action says "slow"; raises when it says "boom"."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "ready", make_info(observation="ready")

    def step(self, action):
        if action == "boom":
            raise ValueError("the env's own message")
        if action == "slow":
            time.sleep(3)
        return action, 0.0, False, False, make_info(observation=action)


def test_env_exception_is_500_with_its_message_and_busy_is_409(served):
    server = served(make_env=_SlowEnv)
    env = agentgym.make(f"remote:{server.url}/{KEYDOOR}", step_timeout_s=0.5)
    env.reset(seed=0)
    with pytest.raises(RemoteEnvError, match="500.*the env's own message"):
        env.step("boom")
    with httpx.Client(base_url=server.url) as http:
        sid = http.post("/sessions", json={}).json()["session_id"]
        slow = threading.Thread(target=lambda: http.post(f"/sessions/{sid}/step", json={"action": "slow"}))
        slow.start()
        time.sleep(0.3)
        with httpx.Client(base_url=server.url) as other:
            assert other.post(f"/sessions/{sid}/step", json={"action": "x"}).status_code == 409
        slow.join()
    env.close()


def test_a_hung_step_times_out_without_stalling_other_sessions(served):
    server = served(make_env=_SlowEnv)
    hung = agentgym.make(f"remote:{server.url}/{KEYDOOR}", step_timeout_s=0.5)
    fine = agentgym.make(f"remote:{server.url}/{KEYDOOR}", step_timeout_s=0.5)
    hung.reset(seed=0)
    fine.reset(seed=0)
    t0 = time.perf_counter()
    with pytest.raises(RemoteEnvError, match="timed out"):
        hung.step("slow")
    assert time.perf_counter() - t0 < 2.5
    assert fine.step("ok")[0] == "ok"      # answered while the other session's step still sleeps
    with pytest.raises(RemoteEnvError, match="reset\\(\\) opens a new one"):
        hung.step("again")
    assert hung.reset(seed=0)[0] == "ready"   # a fresh session
    hung.close()
    fine.close()


def test_idle_sessions_are_reaped_and_reset_reopens(served):
    server = served(idle_timeout_s=0.2)
    env = agentgym.make(f"remote:{server.url}/{KEYDOOR}")
    env.reset(seed=1)
    deadline = time.monotonic() + 5
    while server.service.health()["sessions"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.service.health()["sessions"] == 0
    with pytest.raises(RemoteEnvError, match="no_session"):
        env.step("left")
    assert env.reset(seed=1)[0] == agentgym.make(KEYDOOR).reset(seed=1)[0]
    env.close()


def test_snapshot_restores_the_turn_count_too(served):
    server = served()
    env = agentgym.make(f"remote:{server.url}/{KEYDOOR}")
    env.reset(seed=0)
    for _ in range(8):
        env.step("florp")
    saved = env.snapshot()
    assert env.step("florp")[3] is False and env.step("florp")[3] is True   # the 10th turn truncates
    env.restore(saved)
    assert env.step("florp")[3] is False and env.step("florp")[3] is True
    env.close()


def test_serve_env_cli_in_a_subprocess(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "agentgym", "serve", "env", "agentgym/Toy-KeyDoor-Long-v0",
                             "--port", "0", "--kwargs", '{"length": 5}'], stdout=subprocess.PIPE, text=True,
                            cwd=tmp_path)
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving agentgym/Toy-KeyDoor-Long-v0 at http://127.0.0.1:"), line
        url = line.split(" at ")[1].split()[0]
        env = agentgym.make(f"remote:{url}/agentgym/Toy-KeyDoor-Long-v0")
        obs, info = env.reset(seed=0)
        assert info["task_id"].startswith("keydoor-5-") and env.unwrapped.max_turns == 16
        env.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.parametrize("args, fragment", [
    (["--kwargs", "[1]"], "--kwargs must be a JSON object"),
    (["--kwargs", '{"length": 1}'], "length must be >= 2"),
    (["--port", "70000"], "port must be between 0 and 65535"),
])
def test_serve_env_cli_bad_arguments_are_one_line_errors(args, fragment, tmp_path):
    done = subprocess.run([sys.executable, "-m", "agentgym", "serve", "env", KEYDOOR, *args],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode != 0 and fragment in done.stderr, done.stderr
