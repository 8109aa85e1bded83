#!/usr/bin/env bash
# Builds one image per known agent type, agentsession-<type>:dev from images/<type>/Dockerfile, with buildah and
# without network access inside the build:
#   1. Debian trixie bases made with mmdebstrap (node 20 comes from Debian; codex runs a native binary without it),
#   2. the type's package-lock.json installed with npm ci on this host, cached by the lock's hash,
#   3. the Dockerfile, fed that base and a context that already holds node_modules,
# then imports each image into the local cluster's containerd when it runs. An image whose inputs did not change
# (its label holds their hash) is not rebuilt.
#
# The host installs double as local copies of the adapters: $CACHE_DIR/agents-npm/current/node_modules/.bin holds
# each built type's command (host tests find it through AGENTSESSION_AGENTS_NPM_DIR).
#
# Usage: hack/image/build-agents.sh [TYPE...]        types: claude-code codex gemini (default: all)
#        hack/image/build-agents.sh --print-npm-dir  prints that directory
# Environment:
#   TAG            image tag (default dev)
#   DEBIAN_MIRROR  default http://deb.debian.org/debian
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$HERE/lib.sh"

TYPES=(claude-code codex gemini)
# The command each type's package links into node_modules/.bin.
declare -A COMMAND=([claude-code]=claude-agent-acp [codex]=codex-acp [gemini]=gemini)
TAG="${TAG:-dev}"
DEBIAN_SUITE=trixie
NPM_CACHE="$CACHE_DIR/agents-npm"
NPM_CURRENT="$NPM_CACHE/current"
INPUTS_LABEL=dev.agentsession.inputs

if [ "${1:-}" = --print-npm-dir ]; then
  [ -d "$NPM_CURRENT/node_modules/.bin" ] || log "$NPM_CURRENT is not there yet: run 'make agent-images'" >&2
  echo "$NPM_CURRENT"
  exit 0
fi

selected=("$@")
[ ${#selected[@]} -gt 0 ] || selected=("${TYPES[@]}")
for t in "${selected[@]}"; do
  [ -n "${COMMAND[$t]:-}" ] || die "unknown agent type '$t'; known types: ${TYPES[*]}"
done
command -v npm >/dev/null \
  || die "npm is missing on this host; install node >= 20 with npm (Debian trixie: apt-get install nodejs npm)"

image_build_setup

# ---------------------------------------------------------------- bases
# Keyed by the versions of what they carry, so a Debian update makes a new base and the old one stays usable.
debian_index_update "$DEBIAN_SUITE"
node_versions="$(debian_versions "$DEBIAN_SUITE" nodejs ca-certificates git)"
node_base="localhost/agentsession-agent-base:$DEBIAN_SUITE-$node_versions"
debian_base "$node_base" "$DEBIAN_SUITE-$node_versions" "$DEBIAN_SUITE" nodejs,ca-certificates,git
if [[ " ${selected[*]} " == *" codex "* ]]; then
  plain_versions="$(debian_versions "$DEBIAN_SUITE" ca-certificates git)"
  plain_base="localhost/agentsession-agent-base:$DEBIAN_SUITE-$plain_versions"
  debian_base "$plain_base" "$DEBIAN_SUITE-$plain_versions" "$DEBIAN_SUITE" ca-certificates,git
fi

# ---------------------------------------------------------------- npm installs on the host
# Prints the directory holding TYPE's locked tree; npm ci runs only for a lock not installed before. Install
# scripts stay off, as in the Dockerfiles: some optional packages would fetch binaries from outside the registry.
npm_install() {
  local t="$1" src="$ROOT/images/$1" hash dir
  hash="$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -c1-16)"
  dir="$NPM_CACHE/$t-$hash"
  if [ ! -d "$dir/node_modules" ]; then
    log "npm ci $t (images/$t/package-lock.json) into $dir" >&2
    rm -rf "$dir.partial"
    mkdir -p "$dir.partial"
    cp "$src/package.json" "$src/package-lock.json" "$dir.partial/"
    (cd "$dir.partial" && npm ci --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error >&2) \
      || die "npm ci for $t failed (see above); check access to the npm registry, or regenerate images/$t/package-lock.json with npm install --package-lock-only"
    mv "$dir.partial" "$dir"
    # Installs of older locks of this type are dead weight now.
    find "$NPM_CACHE" -maxdepth 1 -name "$t-*" ! -name "$t-$hash" -exec rm -rf {} +
  fi
  echo "$dir"
}

# ---------------------------------------------------------------- images
built=()
for t in "${selected[@]}"; do
  npm_dir="$(npm_install "$t")"
  mkdir -p "$NPM_CURRENT/node_modules/.bin"
  ln -sfn "$npm_dir/node_modules/.bin/${COMMAND[$t]}" "$NPM_CURRENT/node_modules/.bin/${COMMAND[$t]}"

  full="$(full_name "agentsession-$t:$TAG")"
  if [ "$t" = codex ]; then
    build_args=(--build-arg "BUILD_IMAGE=$node_base" --build-arg "BASE_IMAGE=$plain_base")
  else
    build_args=(--build-arg "BASE_IMAGE=$node_base")
  fi
  inputs="$( { cat "$ROOT/images/$t/Dockerfile"; echo "$npm_dir"; printf '%s\n' "${build_args[@]}"; } | sha256sum | cut -c1-16)"
  have="$(buildah inspect --type image --format "{{index .OCIv1.Config.Labels \"$INPUTS_LABEL\"}}" "$full" 2>/dev/null || true)"
  if [ "$have" = "$inputs" ]; then
    log "$full is up to date (inputs $inputs)"
    fresh=0
  else
    log "building $full"
    buildah bud --quiet --layers --network none --pull-never "${build_args[@]}" --label "$INPUTS_LABEL=$inputs" \
      -t "$full" -f "$ROOT/images/$t/Dockerfile" "$npm_dir" >/dev/null \
      || die "buildah bud for $t failed (see above)"
    log "built $full"
    fresh=1
  fi
  built+=("$full")

  if containerd_running; then
    if [ "$fresh" = 1 ] || [ -z "$(ctr_k8s images ls -q "name==$full" 2>/dev/null)" ]; then
      import_into_cluster "$full"
    fi
  fi
done

containerd_running \
  || log "local cluster's containerd is not running: run 'make cluster-up' then 'make agent-images' to import the images"
log "images (pods: imagePullPolicy: IfNotPresent):"
for full in "${built[@]}"; do print_image_size "$full"; done
log "host copies of the adapters: $NPM_CURRENT/node_modules/.bin (AGENTSESSION_AGENTS_NPM_DIR=$NPM_CURRENT)"
