#!/usr/bin/env bash
# Builds kube-router (run here only as a NetworkPolicy enforcer: its firewall controller, no router, no service
# proxy) from the github.com/cloudnativelabs/kube-router/v2 Go module, fetched through the Go module proxy, into a
# cache keyed by version, so a warm machine skips the build.
#
# The build shares the machine: it runs at the lowest priority and compiles one package at a time.
set -euo pipefail

KUBE_ROUTER_VERSION="${KUBE_ROUTER_VERSION:-2.1.0}"
CACHE_DIR="${AGENTSESSION_CACHE:-$HOME/.cache/agentsession}"
DIR="$CACHE_DIR/kube-router/v$KUBE_ROUTER_VERSION"
OUT="$DIR/bin"

command -v go >/dev/null || { echo "ERROR: go not found; install Go >= 1.26 to build kube-router" >&2; exit 1; }
mkdir -p "$OUT"
[ -x "$OUT/kube-router" ] && { echo "kube-router v$KUBE_ROUTER_VERSION cached in $OUT"; exit 0; }
exec 9>"$DIR/.build.lock"
if ! flock -n 9; then
  echo "another build of kube-router v$KUBE_ROUTER_VERSION is running; waiting for it"
  flock 9
fi
[ -x "$OUT/kube-router" ] && { echo "kube-router v$KUBE_ROUTER_VERSION cached in $OUT"; exit 0; }

module="github.com/cloudnativelabs/kube-router/v2"
echo "building kube-router v$KUBE_ROUTER_VERSION (a cold build takes several minutes)"
start=$(date +%s)
tmp="$(mktemp -d "$DIR/gobin.XXXXXX")"
CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS="${GOFLAGS:-} -p=${AGENTSESSION_BUILD_JOBS:-1}" nice -n 19 go install -trimpath \
  -ldflags "-s -w -X $module/pkg/version.Version=v$KUBE_ROUTER_VERSION" "$module/cmd/kube-router@v$KUBE_ROUTER_VERSION" \
  || { rm -rf "$tmp"; echo "ERROR: go install of $module@v$KUBE_ROUTER_VERSION failed (see above); re-run to retry" >&2; exit 1; }
mv "$tmp/kube-router" "$OUT/kube-router"
rm -rf "$tmp"
echo "built kube-router v$KUBE_ROUTER_VERSION in $(( $(date +%s) - start ))s into $OUT"
