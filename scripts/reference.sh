#!/usr/bin/env bash
# Installs the reference exec-server (@openai/codex, 0.171.0 unless told
# otherwise) with npm into a cache folder and prints the path of its binary
# on stdout (nothing else). An existing install is reused. Exits non-zero
# with a message on stderr when npm is missing or cannot reach the registry.
#
#   ref=$(bash scripts/reference.sh) && export EXEC_SERVER_REFERENCE=$ref
#   ref169=$(bash scripts/reference.sh 0.169.0)     # the older client
#
# The version is the first argument, else EXEC_SERVER_REFERENCE_VERSION,
# else 0.171.0. EXEC_SERVER_REFERENCE_DIR overrides the cache folder
# (default ${XDG_CACHE_HOME:-$HOME/.cache}/exec-server-reference); each
# version is installed in its own subfolder, and an install of the same
# version directly in the cache folder (this script's old layout) is reused.
set -euo pipefail

version="${1:-${EXEC_SERVER_REFERENCE_VERSION:-0.171.0}}"
case "$version" in
  [0-9]*.[0-9]*.[0-9]*) ;;
  *) echo "reference.sh: version must look like 0.171.0, got '$version'" >&2; exit 2 ;;
esac
base="${EXEC_SERVER_REFERENCE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/exec-server-reference}"
rel=node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex

installed_version() {
  # The platform package's own manifest names the version installed in $1.
  sed -n 's/.*"version": *"\([^"]*\)".*/\1/p' "$1/node_modules/@openai/codex-linux-x64/package.json" 2>/dev/null | head -n1
}

for d in "$base/$version" "$base"; do
  if [ -x "$d/$rel" ] && case "$(installed_version "$d")" in "$version"|"$version"-*) true ;; *) false ;; esac; then
    echo "$d/$rel"
    exit 0
  fi
done
dir="$base/$version"
bin="$dir/$rel"

if [ "$(uname -s)-$(uname -m)" != "Linux-x86_64" ]; then
  echo "reference.sh: the reference binary is only fetched for Linux x86_64, this is $(uname -s)-$(uname -m)" >&2
  exit 1
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "reference.sh: npm is not installed; cannot fetch @openai/codex@$version" >&2
  exit 1
fi

mkdir -p "$dir"
log="$dir/npm-install.log"
# --no-audit/--no-fund keep npm from calling anything but the registry;
# the timeouts make an unreachable registry fail in seconds, not minutes.
if ! npm install --prefix "$dir" --no-audit --no-fund --no-save --loglevel=error \
      --fetch-retries=1 --fetch-timeout=20000 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=5000 \
      "@openai/codex@$version" >"$log" 2>&1; then
  echo "reference.sh: npm could not install @openai/codex@$version into $dir (registry unreachable?); see $log:" >&2
  tail -n 5 "$log" >&2 || true
  exit 1
fi
if [ ! -x "$bin" ]; then
  echo "reference.sh: npm installed @openai/codex@$version but $bin is missing (platform package not fetched?)" >&2
  exit 1
fi
echo "$bin"
