"""`agentgym serve gateway`: bad arguments get one line; the served gateway records a session to --record."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from agentgym.cli import main


@pytest.mark.parametrize("argv,expect", [
    (["--policy", "tiny:keydoor", "--port", "70000"], "--port must be between 0 and 65535"),
    (["--policy", "tiny:keydoor", "--max-new-tokens", "0"], "max_new_tokens must be >= 1"),
    (["--policy", "tiny:nothing"], "unknown tiny model 'nothing'"),
])
def test_bad_arguments_get_one_line(argv, expect, capsys, tmp_path):
    assert main(["serve", "gateway", *argv, "--work-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert expect in err and len(err.splitlines()) == 1 and err.startswith("agentgym serve: error:")


@pytest.mark.slow
def test_served_gateway_records_a_closed_session(tmp_path):
    openai = pytest.importorskip("openai")
    httpx = pytest.importorskip("httpx")
    record = tmp_path / "sessions.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "agentgym", "serve", "gateway", "--policy", "tiny:keydoor", "--port",
                             "0", "--work-dir", str(tmp_path), "--record", str(record), "--max-new-tokens", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving tiny:keydoor at http://127.0.0.1:"), line + proc.stderr.read()
        url = line.split(" at ", 1)[1].split()[0]
        sid = httpx.post(f"{url}/sessions", json={"task": "demo"}).json()["id"]
        answer = openai.OpenAI(base_url=url, api_key=sid, max_retries=0).chat.completions.create(
            model="agentgym", messages=[{"role": "user", "content": "room 0 . key here ."}], max_tokens=2)
        httpx.post(f"{url}/sessions/{sid}/close", json={"reward": 1.0, "success": True})
        saved = json.loads(record.read_text().splitlines()[0])
        assert saved["session"]["id"] == sid and saved["session"]["task"] == "demo"
        (turn,) = saved["trajectory"]["turns"]
        assert turn["response_ids"] == answer.choices[0].model_extra["token_ids"]
        assert turn["prompt_ids"] == answer.model_extra["prompt_token_ids"] and turn["reward"] == 1.0
    finally:
        proc.terminate()
        proc.wait(timeout=30)
