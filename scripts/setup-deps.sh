#!/usr/bin/env bash
# Installs every Debian 12 package Trainscope needs (idempotent: only what is missing).
# This list is the one place the project's system dependencies are named.
set -euo pipefail
PACKAGES=(
  build-essential cmake ninja-build pkg-config git      # toolchain
  nlohmann-json3-dev libcli11-dev libsqlite3-dev sqlite3 # core: JSON, command line, run store
  libdnnl-dev ocl-icd-opencl-dev                         # CPU GEMM (oneDNN; its CMake config needs OpenCL)
  libopenmpi-dev openmpi-bin                             # distributed ranks
  libgtest-dev libgmock-dev googletest libbenchmark-dev  # tests and benchmarks
  qt6-base-dev qt6-base-dev-tools libqt6charts6-dev libgl-dev  # desktop app
  xvfb xauth fonts-dejavu-core                           # GUI tests and screenshots
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "trainscope: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
