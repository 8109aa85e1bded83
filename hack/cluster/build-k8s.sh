#!/usr/bin/env bash
# Builds the Kubernetes control-plane and node binaries from the k8s.io/kubernetes Go module
# (fetched through the Go module proxy) into a cache keyed by version, so a warm machine skips the build.
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-1.34.4}"
CACHE_DIR="${AGENTSESSION_CACHE:-$HOME/.cache/agentsession}"
OUT="$CACHE_DIR/kubernetes/v$K8S_VERSION/bin"
COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)

missing=()
for c in "${COMPONENTS[@]}"; do [ -x "$OUT/$c" ] || missing+=("$c"); done
if [ ${#missing[@]} -eq 0 ]; then echo "kubernetes v$K8S_VERSION binaries cached in $OUT"; exit 0; fi

work="$CACHE_DIR/kubernetes/v$K8S_VERSION/src"
mkdir -p "$work" "$OUT"
command -v go >/dev/null || { echo "ERROR: go not found; install Go >= 1.24 to build Kubernetes" >&2; exit 1; }
# Two concurrent builds would each take the machine's cores for many minutes: the second waits for the first.
exec 9>"$CACHE_DIR/kubernetes/.build-v$K8S_VERSION.lock"
if ! flock -n 9; then
  echo "another build of kubernetes v$K8S_VERSION is running; waiting for it"
  flock 9
  missing=()
  for c in "${COMPONENTS[@]}"; do [ -x "$OUT/$c" ] || missing+=("$c"); done
  [ ${#missing[@]} -eq 0 ] && { echo "kubernetes v$K8S_VERSION binaries built in $OUT"; exit 0; }
fi
cd "$work"
mod="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/v$K8S_VERSION.mod"
[ -f "$mod" ] || go mod download "k8s.io/kubernetes@v$K8S_VERSION"

# k8s.io/kubernetes points its staging modules at ./staging; a consumer must pin each to its published twin.
{
  echo "module agentsession.dev/k8sbuild"
  echo "go 1.24.0"
  echo "require k8s.io/kubernetes v$K8S_VERSION"
  grep -E '=> \./staging/' "$mod" | awk -v v="v0.${K8S_VERSION#1.}" '{print "replace " $1 " => " $1 " " v}'
} > go.mod
echo 'package main' > tools.go
printf 'package main\nimport (\n' > tools.go
printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "${COMPONENTS[@]}" >> tools.go
printf ')\n' >> tools.go
sed -i '1s/^/\/\/go:build tools\n\n/' tools.go
GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true
for c in "${missing[@]}"; do
  echo "building $c v$K8S_VERSION (cold builds take several minutes each)"
  start=$(date +%s)
  CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w \
    -X k8s.io/component-base/version.gitVersion=v$K8S_VERSION \
    -X k8s.io/component-base/version.gitMajor=1 \
    -X k8s.io/component-base/version.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2) " \
    -o "$OUT/$c.tmp" "k8s.io/kubernetes/cmd/$c" \
    || { echo "ERROR: go build of $c failed (see above); re-run to retry, the compile cache keeps finished work" >&2; exit 1; }
  mv "$OUT/$c.tmp" "$OUT/$c"
  echo "built $c in $(( $(date +%s) - start ))s"
done
echo "kubernetes v$K8S_VERSION binaries built in $OUT"
