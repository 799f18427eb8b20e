"""`import agentgym` (and its env registry) loads no heavy dependency: checked in a fresh interpreter."""
import json
import subprocess
import sys

HEAVY = ("torch", "vllm", "docker", "playwright", "transformers", "textworld", "fastapi", "uvicorn", "ray",
         "sentence_transformers", "bm25s", "jericho")

CODE = """
import json, sys
import agentgym
import agentgym.envs
ids = agentgym.list_envs()
agentgym.list_suites()
import agentgym.checker, agentgym.cli_envs, agentgym.tools
from agentgym.cli import build_parser
build_parser()
print(json.dumps({"ids": len(ids), "modules": sorted(m.split(".")[0] for m in sys.modules)}))
"""


def test_import_agentgym_is_light():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    loaded = sorted(set(HEAVY) & set(result["modules"]))
    assert loaded == [], f"`import agentgym` loaded {loaded}; import them inside the functions that use them"
    assert result["ids"] >= 3
