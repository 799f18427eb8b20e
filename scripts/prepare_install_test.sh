#!/usr/bin/env bash
# Fills the local package sources tests/test_install_debian.py feeds install.sh from, inside a Debian 12
# root filesystem with no network: Debian's python3-venv and what it needs (a flat apt repository of .debs)
# and wheels of agentgym's core dependencies for CPython 3.11 on x86_64 (a pip wheelhouse).
#   bash scripts/prepare_install_test.sh      # into ~/.cache/agentgym/install-test (skipped when present)
# Needs apt-get, dpkg-scanpackages (dpkg-dev) and the package index (PyPI, Debian) once; install.sh --test runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${AGENTGYM_CACHE:-$HOME/.cache/agentgym}/install-test"
DEBS=(python3-venv python3.11-venv python3-pip-whl python3-setuptools-whl python3-distutils python3-lib2to3
      python3 python3-minimal libpython3-stdlib python3.11 python3.11-minimal libpython3.11-stdlib libpython3.11-minimal)
have_all() { [[ -s "$OUT/debs/Packages" && -f "$OUT/wheels/.complete" ]] || return 1
             for d in "${DEBS[@]}"; do compgen -G "$OUT/debs/${d}_*.deb" >/dev/null || return 1; done; }
if have_all; then echo "install-test sources present in $OUT"; exit 0; fi
command -v dpkg-scanpackages >/dev/null || { echo "dpkg-scanpackages missing: apt-get install -y dpkg-dev" >&2; exit 1; }
mkdir -p "$OUT/debs" "$OUT/wheels"

# The image is debootstrapped from bookworm: the same versions as this Debian 12 host's candidates.
(cd "$OUT/debs" && apt-get download -qq "${DEBS[@]}" >/dev/null 2>&1) \
  || (apt-get update -qq && cd "$OUT/debs" && apt-get download -qq "${DEBS[@]}" >/dev/null)
(cd "$OUT/debs" && dpkg-scanpackages --multiversion . /dev/null 2>/dev/null > Packages)

# The core dependencies (pyproject [project] dependencies) and the build backend, as binary wheels.
deps=$(python3 - <<'EOF'
import tomllib
with open("pyproject.toml", "rb") as f:
    project = tomllib.load(f)
print(" ".join(project["project"]["dependencies"] + project["build-system"]["requires"] + ["wheel"]))
EOF
)
# shellcheck disable=SC2086  # one argument per requirement
python3 -m pip download -q --disable-pip-version-check --only-binary=:all: --implementation cp \
  --python-version 3.11 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_34_x86_64 \
  -d "$OUT/wheels" $deps
touch "$OUT/wheels/.complete"
echo "install-test sources in $OUT: $(ls "$OUT/debs" | grep -c '\.deb$') debs, $(ls "$OUT/wheels" | grep -c '\.whl$') wheels"
