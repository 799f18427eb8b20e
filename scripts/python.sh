# Sourced by install.sh, quickstart.sh and .ci/run: which Python agentgym lives in.
#   source scripts/python.sh; agentgym_python      # prints the interpreter to use
# In order: $PYTHON if set; the active virtual environment; the repo's .venv (install.sh made it because
# python3 could not take packages); python3. `python3_takes_packages` says whether python3 has pip and is
# not marked EXTERNALLY-MANAGED (PEP 668: a stock Debian's python3 is both without pip and marked).

AGENTGYM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
AGENTGYM_VENV="${AGENTGYM_VENV:-$AGENTGYM_ROOT/.venv}"

python3_takes_packages() {
  python3 - <<'EOF' 2>/dev/null
import importlib.util, os, sys, sysconfig
in_venv = sys.prefix != sys.base_prefix
marked = os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))
sys.exit(0 if importlib.util.find_spec("pip") and (in_venv or not marked) else 1)
EOF
}

agentgym_python() {
  if [[ -n "${PYTHON:-}" ]]; then echo "$PYTHON"
  elif [[ -n "${VIRTUAL_ENV:-}" && -x "$VIRTUAL_ENV/bin/python" ]]; then echo "$VIRTUAL_ENV/bin/python"
  elif [[ -x "$AGENTGYM_VENV/bin/python" ]]; then echo "$AGENTGYM_VENV/bin/python"
  else echo python3
  fi
}
