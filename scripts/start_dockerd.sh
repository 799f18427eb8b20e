#!/usr/bin/env bash
# Sandboxes for the SWE envs: installs docker.io, bubblewrap and debootstrap (Debian), starts dockerd if none
# answers, waits for it, and builds the local base image once (scripts/build_sandbox_image.sh, cached).
# Where dockerd cannot start (no root, no cgroups, inside some containers) it says why and exits 0:
# the Docker tests then skip with that reason and the bubblewrap back end still runs.
set -uo pipefail
cd "$(dirname "$0")/.."
LOG="${AGENTGYM_DOCKERD_LOG:-/tmp/agentgym-dockerd.log}"
say() { printf '%s\n' "$*"; }

missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v debootstrap >/dev/null || missing+=(debootstrap)
if ((${#missing[@]})); then
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}" >/dev/null 2>&1 \
    || { apt-get update -qq && apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}" >/dev/null; } \
    || say "could not install ${missing[*]} (not root? no apt?)"
fi

if ! docker info >/dev/null 2>&1; then
  if ! command -v dockerd >/dev/null; then say "no dockerd: Docker sandboxes will be skipped"; exit 0; fi
  say "starting dockerd (log: $LOG)"
  setsid nohup dockerd >"$LOG" 2>&1 < /dev/null &
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
fi
if ! docker info >/dev/null 2>&1; then
  say "dockerd did not start; Docker sandboxes will be skipped. Last log lines:"; tail -5 "$LOG" 2>/dev/null
  exit 0
fi
say "dockerd is up"
bash scripts/build_sandbox_image.sh || say "the sandbox image could not be built; Docker sandbox tests will skip"
