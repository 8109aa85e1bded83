#!/usr/bin/env bash
# Builds kwok (simulated nodes: pods that turn Running and Ready without a kubelet or containers) from the
# sigs.k8s.io/kwok Go module, fetched through the Go module proxy, into a cache keyed by version (a warm machine
# skips the build); and writes kwok's standard stages from the same module next to it, the ones kwokctl installs:
# node initialize and heartbeat with lease, pod ready, complete and delete.
#
# The build shares the machine: it runs at the lowest priority and compiles one package at a time.
set -euo pipefail

KWOK_VERSION="${KWOK_VERSION:-0.8.0}"
CACHE_DIR="${AGENTSESSION_CACHE:-$HOME/.cache/agentsession}"
DIR="$CACHE_DIR/kwok/v$KWOK_VERSION"
OUT="$DIR/bin"
STAGES="$DIR/stages.yaml"

command -v go >/dev/null || { echo "ERROR: go not found; install Go >= 1.26 to build kwok" >&2; exit 1; }
mkdir -p "$OUT"
exec 9>"$DIR/.build.lock"
if ! flock -n 9; then
  echo "another build of kwok v$KWOK_VERSION is running; waiting for it"
  flock 9
fi

module="sigs.k8s.io/kwok@v$KWOK_VERSION"
src="$(go mod download -json "$module" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
[ -d "$src/kustomize/stage" ] || { echo "ERROR: go mod download $module gave no source directory" >&2; exit 1; }
{
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
           pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    echo "---"
    cat "$src/kustomize/stage/$f"
  done
} >"$STAGES.tmp"
mv "$STAGES.tmp" "$STAGES"
[ -x "$OUT/kwok" ] && { echo "kwok v$KWOK_VERSION cached in $OUT"; exit 0; }

echo "building kwok v$KWOK_VERSION (a cold build takes several minutes)"
start=$(date +%s)
tmp="$(mktemp -d "$DIR/gobin.XXXXXX")"
CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS="${GOFLAGS:-} -p=1" nice -n 19 go install -trimpath \
  -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=v$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION" \
  || { rm -rf "$tmp"; echo "ERROR: go install of $module failed (see above); re-run to retry" >&2; exit 1; }
mv "$tmp/kwok" "$OUT/kwok"
rm -rf "$tmp"
echo "built kwok in $(( $(date +%s) - start ))s"
echo "kwok v$KWOK_VERSION built in $OUT"
