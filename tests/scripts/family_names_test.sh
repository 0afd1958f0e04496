#!/usr/bin/env bash
# No file outside the model families' folders branches on an architecture (docs/architecture.md,
# "The map"): the engine, the estimator, the app and the GUI ask the family. Fails naming each
# line of code outside engine/core/src/model/families/ that quotes a family's name; the default
# value of model.arch is the one exception.
set -euo pipefail
root="$1"
cd "$root"
names=$(sed -n -e 's/^  std::string name() const override { return "\([a-z0-9_]*\)"; }$/\1/p' \
  -e 's/^    t\.name = "\([a-z0-9_]*\)";$/\1/p' engine/core/src/model/families/*/*.cpp)
[ -n "$names" ] || { echo "no family names found under engine/core/src/model/families"; exit 1; }
pattern=$(printf '"%s"|' $names)
pattern="${pattern%|}"
hits=$(grep -rnE "$pattern" engine gui --include='*.cpp' --include='*.h' \
  | grep -v '^engine/core/src/model/families/' \
  | grep -vE '^[^:]+:[0-9]+:\s*//' \
  | grep -vE 'std::string arch(itecture)? = "[a-z0-9_]+";' || true)
if [ -n "$hits" ]; then
  echo "code outside the family folders names an architecture (ask core::modelFamily instead):"
  echo "$hits"
  exit 1
fi
echo "ok: no architecture named outside engine/core/src/model/families ("$names")"
