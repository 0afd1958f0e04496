#!/usr/bin/env bash
# Installs every Debian 12 package Trainscope needs (idempotent: no apt call when all are present).
# This list is the one place the project's system dependencies are named; every name is a real
# package (not a virtual one), so dpkg-query can tell whether it is installed.
#   scripts/setup-deps.sh          install what is missing
#   scripts/setup-deps.sh --list   print the package names, one per line
set -euo pipefail
PACKAGES=(
  build-essential cmake ninja-build pkg-config git ccache # toolchain (ccache: faster rebuilds)
  nlohmann-json3-dev libcli11-dev libsqlite3-dev sqlite3 # core: JSON, command line, run store
  libicu-dev                                             # tokenizer.json: Unicode regex + normalization (ICU)
  libdnnl-dev ocl-icd-opencl-dev                         # CPU GEMM (oneDNN; its CMake config needs OpenCL)
  libopenmpi-dev openmpi-bin                             # distributed ranks
  libgtest-dev libgmock-dev googletest libbenchmark-dev  # tests and benchmarks
  qt6-base-dev qt6-base-dev-tools qt6-charts-dev         # desktop app: Qt Widgets + Charts
  libqt6opengl6-dev libgl-dev                            # Qt6Charts' CMake package requires Qt6OpenGL
  xvfb xauth fonts-dejavu-core                           # GUI tests and screenshots
  clang libclang-rt-14-dev libomp-14-dev                 # fuzzing (libFuzzer + sanitizers, OpenMP for clang)
)
if [ "${1:-}" = "--list" ]; then
  printf '%s\n' "${PACKAGES[@]}"
  exit 0
fi
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
