#!/usr/bin/env bash
# check-deps.sh — does scripts/setup-deps.sh install every Debian package the build used?
#
# A clean clone on a machine still sees every package ever installed by hand, so a build can be
# green while a brand-new machine fails. This reads a built folder and collects the files the
# build really used:
#   - CMake package folders named in CMakeCache.txt (<Pkg>_DIR:PATH=/usr/...),
#   - system headers in the compiler's dependency records (ninja -t deps),
#   - libraries on the link lines (build.ninja LINK_LIBRARIES) and those the built programs load
#     (ldd),
# maps each file to the Debian package that owns it (dpkg's file lists), and checks that package
# is in the install closure of the listed packages: the names themselves plus their Depends and
# Pre-Depends, recursively. Recommends do not count: setup-deps.sh installs without them.
# Files outside Debian's packages (/usr/local, e.g. the CUDA toolkit) are optional and skipped.
#
# usage: scripts/check-deps.sh [BUILD_DIR] [PACKAGE...]
#   BUILD_DIR  default build/default
#   PACKAGE... the packages to check against; default: `scripts/setup-deps.sh --list`
# Prints "check-deps: OK ..." (exit 0) or "check-deps: MISSING ..." with one line per missing
# package and a file it provides (exit 1); exit 2 when the build folder cannot be read.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD=${1:-$ROOT/build/default}
shift || true
[[ -f $BUILD/CMakeCache.txt ]] || { echo "check-deps: no CMakeCache.txt in $BUILD (configure and build first)"; exit 2; }
[[ -f $BUILD/build.ninja ]] || { echo "check-deps: no build.ninja in $BUILD (Ninja builds only)"; exit 2; }
if [[ $# -gt 0 ]]; then
  listed=("$@")
else
  mapfile -t listed < <("$ROOT/scripts/setup-deps.sh" --list)
fi
[[ ${#listed[@]} -gt 0 ]] || { echo "check-deps: empty package list"; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 0. Every listed name must be a real package: dpkg-query never reports a virtual name as
#    installed, so setup-deps.sh would call apt on every run.
virtual=$(apt-cache policy "${listed[@]}" 2>/dev/null | awk '/^[^ ]/{n=$1; sub(":$","",n)} /Candidate: \(none\)/{print n}')
if [[ -n $virtual ]]; then
  echo "check-deps: setup-deps.sh names packages that do not exist or are virtual (name the real package):"
  printf '  %s\n' $virtual
  exit 1
fi

# 1. Files the build used.
{
  # CMake package folders: every .cmake file directly inside each (the folder's owner).
  sed -n 's/^[A-Za-z0-9_]*_DIR:PATH=\(\/usr\/.*\)$/\1/p' "$BUILD/CMakeCache.txt" | sort -u |
    while read -r d; do [[ -d $d ]] && find "$d" -maxdepth 1 -type f -name '*.cmake'; done
  # System headers the compiler read.
  (cd "$BUILD" && ninja -t deps 2>/dev/null) | sed -n 's/^ \+\(\/usr\/[^ ]*\)$/\1/p'
  # Libraries named on link lines.
  sed -n 's/^ *LINK_LIBRARIES = //p' "$BUILD/build.ninja" | tr ' ' '\n' | grep '^/usr/.*\.\(so\|a\)' 
  # Shared libraries the built programs and libraries load.
  find "$BUILD" -type f \( -perm -u+x -o -name '*.so*' \) -not -path '*/CMakeFiles/*' 2>/dev/null |
    while read -r f; do
      head -c 4 "$f" 2>/dev/null | grep -q 'ELF' || continue
      ldd "$f" 2>/dev/null | sed -n 's/.*=> \(\/[^ ]*\) .*/\1/p'
    done
} | grep -v '^/usr/local/' | sort -u >"$tmp/files"
[[ -s $tmp/files ]] || { echo "check-deps: no used files found in $BUILD (build it first)"; exit 2; }

# 2. The owner of each file, through its own path and its resolved one (headers and libraries
#    are often reached through symlinks, and /lib is /usr/lib on Debian 12), in one pass over
#    dpkg's file lists.
{
  cat "$tmp/files"
  xargs -a "$tmp/files" -d '\n' readlink -f 2>/dev/null
  sed -n 's|^/usr/lib/|/lib/|p' "$tmp/files"
} | sort -u >"$tmp/paths"
grep -F -x -f "$tmp/paths" /var/lib/dpkg/info/*.list 2>/dev/null |
  sed -n 's|^/var/lib/dpkg/info/\([^:]*\)\(:[a-z0-9]*\)\?\.list:\(.*\)$|\1 \3|p' |
  sort -u -k1,1 >"$tmp/owners"

# 3. The install closure of the listed packages (Depends and Pre-Depends, recursively).
apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
  --no-replaces --no-enhances "${listed[@]}" 2>/dev/null |
  sed -n 's/^\([^ <][^ :]*\).*/\1/p; s/^ *|\?\(Pre\)\?Depends: \([^<][^ :]*\).*/\2/p' >"$tmp/closure"
printf '%s\n' "${listed[@]}" >>"$tmp/closure"
sort -u "$tmp/closure" -o "$tmp/closure"

# 4. Every owner must be in the closure.
missing=()
while read -r pkg file; do
  grep -qx "$pkg" "$tmp/closure" || missing+=("$pkg (provides $file)")
done <"$tmp/owners"
if [[ ${#missing[@]} -gt 0 ]]; then
  echo "check-deps: MISSING from scripts/setup-deps.sh's install closure (add them to PACKAGES):"
  printf '  %s\n' "${missing[@]}"
  exit 1
fi
echo "check-deps: OK: $(wc -l <"$tmp/owners") Debian packages used by the build ($(wc -l <"$tmp/files") files), all installed by setup-deps.sh's ${#listed[@]} names"
