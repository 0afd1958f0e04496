#!/usr/bin/env bash
# check_deps_test.sh SOURCE_DIR BUILD_DIR GUI(0|1): scripts/check-deps.sh passes on the setup
# script's own list and fails, naming the package, for lists that miss a needed package or name
# a virtual one (the two ways a brand-new machine failed before).
set -uo pipefail
SRC=$1 BUILD=$2 GUI=$3
CHECK="$SRC/scripts/check-deps.sh"
mapfile -t listed < <("$SRC/scripts/setup-deps.sh" --list)
fails=0
without() {  # package -> the list without it
  local p
  for p in "${listed[@]}"; do [[ $p == "$1" ]] || echo "$p"; done
}
expect() {  # name expected-exit must-contain command...
  local name=$1 want=$2 needle=$3
  shift 3
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [[ $rc -ne $want ]] || ! grep -qF -- "$needle" <<<"$out"; then
    echo "FAIL $name: exit $rc (want $want), output must contain '$needle':"
    echo "$out" | head -20
    fails=$((fails + 1))
  else
    echo "ok   $name: $(head -1 <<<"$out")"
  fi
}
expect "the setup script's list" 0 "check-deps: OK" "$CHECK" "$BUILD"
mapfile -t l < <(without libsqlite3-dev)
expect "without libsqlite3-dev" 1 "libsqlite3-dev" "$CHECK" "$BUILD" "${l[@]}"
mapfile -t l < <(without nlohmann-json3-dev)
expect "without nlohmann-json3-dev" 1 "nlohmann-json3-dev" "$CHECK" "$BUILD" "${l[@]}"
if [[ $GUI == 1 ]]; then
  # The package that hid on CI: Qt6Charts' CMake package needs Qt6OpenGL's.
  mapfile -t l < <(without libqt6opengl6-dev)
  expect "without libqt6opengl6-dev" 1 "libqt6opengl6-dev" "$CHECK" "$BUILD" "${l[@]}"
  # A virtual name is never "installed": setup-deps.sh would call apt on every run.
  mapfile -t l < <(without qt6-charts-dev; echo libqt6charts6-dev)
  expect "a virtual name" 1 "libqt6charts6-dev" "$CHECK" "$BUILD" "${l[@]}"
fi
# setup-deps.sh makes no apt call when everything is installed (here it is: the build ran).
expect "no apt call when all are present" 0 "" env PATH="$SRC/tests/scripts/no-apt:$PATH" \
  "$SRC/scripts/setup-deps.sh"
exit $((fails > 0))
