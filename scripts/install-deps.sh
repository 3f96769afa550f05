#!/usr/bin/env bash
# Installs the Debian packages Plexus builds and tests with. Idempotent: does
# nothing when they are all present. Needs root (or sudo) to install.
set -euo pipefail

packages=(g++ meson ninja-build pkg-config cmake doctest-dev libsodium-dev
          libopenmpi-dev openmpi-bin libucx-dev ucx-utils libgloo-dev
          clang libclang-rt-14-dev slurm-wlm munge)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root to install: ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
