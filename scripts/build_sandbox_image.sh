#!/usr/bin/env bash
# Builds the SWE sandbox base image locally, with no registry: debootstrap a minimal Debian with python3
# and pytest, tar it, `docker import` it as agentgym/swe-base:1. The tarball is cached under
# ~/.cache/agentgym/sandbox so a second run only re-imports (or skips entirely when the image exists).
#   bash scripts/build_sandbox_image.sh            # build if missing
#   bash scripts/build_sandbox_image.sh --rebuild  # throw the cache away and build again
set -euo pipefail
IMAGE="${AGENTGYM_SWE_IMAGE:-agentgym/swe-base:1}"
CACHE="${AGENTGYM_CACHE:-$HOME/.cache/agentgym}/sandbox"
TARBALL="$CACHE/swe-base-bookworm.tar"
SUITE="${SWE_BASE_SUITE:-bookworm}"
MIRROR="${SWE_BASE_MIRROR:-http://deb.debian.org/debian}"
PACKAGES="python3,python3-pytest,ca-certificates"
mkdir -p "$CACHE"

if [[ "${1:-}" == "--rebuild" ]]; then rm -f "$TARBALL"; docker rmi -f "$IMAGE" >/dev/null 2>&1 || true; fi
if docker image inspect "$IMAGE" >/dev/null 2>&1; then echo "sandbox image $IMAGE present"; exit 0; fi

if [[ ! -s "$TARBALL" ]]; then
  command -v debootstrap >/dev/null || { echo "debootstrap missing: apt-get install -y debootstrap" >&2; exit 1; }
  ROOT="$(mktemp -d "$CACHE/rootfs.XXXXXX")"
  trap 'rm -rf "$ROOT"' EXIT
  echo "debootstrap $SUITE (minbase + $PACKAGES) into $ROOT: a few minutes, once"
  debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOT" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 \
    || { tail -20 "$CACHE/debootstrap.log" >&2; exit 1; }
  # An unprivileged user the sandbox runs as, and a workspace it owns.
  chroot "$ROOT" /usr/sbin/groupadd -g 1000 agent
  chroot "$ROOT" /usr/sbin/useradd -u 1000 -g 1000 -M -d /workspace -s /bin/bash agent
  mkdir -p "$ROOT/workspace" && chown 1000:1000 "$ROOT/workspace"
  # Trim what a sandbox never needs: apt lists/caches, docs, man pages, locales.
  rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/* "$ROOT"/usr/share/doc/* \
         "$ROOT"/usr/share/man/* "$ROOT"/usr/share/locale/*
  tar -C "$ROOT" --numeric-owner -cf "$TARBALL.part" . && mv "$TARBALL.part" "$TARBALL"
fi
echo "docker import $TARBALL as $IMAGE"
docker import --change 'USER agent' --change 'WORKDIR /workspace' --change 'ENV PYTHONDONTWRITEBYTECODE=1' \
  --change 'CMD ["sleep", "infinity"]' "$TARBALL" "$IMAGE" >/dev/null
docker run --rm --network none "$IMAGE" python3 -c "import pytest, sys; print('sandbox image ok: python', sys.version.split()[0], 'pytest', pytest.__version__)"
