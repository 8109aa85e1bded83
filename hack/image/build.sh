#!/usr/bin/env bash
# Builds the project image with buildah, without a registry or network access inside the build:
#   1. a Debian bookworm base with python3, made with mmdebstrap from Debian's mirror (cached by python3 version),
#   2. wheels of the project and all its dependencies, built on this host with pip,
#   3. the Dockerfile, fed that base and that wheelhouse,
# then imports the result into the local cluster's containerd (namespace k8s.io) when it runs.
#
# Environment:
#   IMAGE        tag to build (default agentsession:dev)
#   BASE_IMAGE   use this base instead of the mmdebstrap one (must carry python3.11)
#   DEBIAN_MIRROR  default http://deb.debian.org/debian
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
# shellcheck source=../cluster/lib.sh
source "$ROOT/hack/cluster/lib.sh"

IMAGE="${IMAGE:-agentsession:dev}"
DEBIAN_SUITE=bookworm
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
WHEELHOUSE="$HERE/wheelhouse"
IMAGES_CACHE="$CACHE_DIR/images"

# buildah stores "name:tag" as localhost/name:tag, a pod's image "name:tag" means docker.io/library/name:tag:
# build under the name the kubelet will ask for.
full_name() {
  local ref="$1" first="${1%%/*}"
  if [[ "$ref" != */* ]]; then echo "docker.io/library/$ref"
  elif [[ "$first" != *.* && "$first" != *:* && "$first" != localhost ]]; then echo "docker.io/$ref"
  else echo "$ref"; fi
}
FULL_IMAGE="$(full_name "$IMAGE")"

for c in buildah mmdebstrap; do
  command -v "$c" >/dev/null || { log "missing $c: running hack/tools/install.sh"; "$ROOT/hack/tools/install.sh"; break; }
done

# Root here cannot raise rlimits, and buildah's defaults ask for more than the hard limit allows.
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
EOF
export CONTAINERS_CONF="$tmp/containers.conf"

# ---------------------------------------------------------------- base image
if [ -n "${BASE_IMAGE:-}" ]; then
  base="$BASE_IMAGE"
  log "base image $base (from BASE_IMAGE)"
else
  pyver="$(apt-cache policy python3 2>/dev/null | awk '/Candidate:/ {print $2}')"
  [ -n "$pyver" ] && [ "$pyver" != "(none)" ] || { apt-get update -qq; pyver="$(apt-cache policy python3 | awk '/Candidate:/ {print $2}')"; }
  [ -n "$pyver" ] || die "cannot tell Debian's python3 version (apt-cache policy python3); run apt-get update"
  key="$DEBIAN_SUITE-python3-${pyver//[^A-Za-z0-9.]/_}"
  base="localhost/agentsession-base:$key"
  if ! buildah inspect --type image "$base" >/dev/null 2>&1; then
    mkdir -p "$IMAGES_CACHE"
    tarball="$IMAGES_CACHE/base-$key.tar"
    if [ ! -f "$tarball" ]; then
      log "building base $base with mmdebstrap from $DEBIAN_MIRROR"
      # The merged-usr hook lays out /usr itself; otherwise the usrmerge package comes in, and perl with it.
      mmdebstrap --quiet --variant=essential --include=python3 \
        --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
        --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        "$DEBIAN_SUITE" "${tarball%.tar}.partial.tar" "$DEBIAN_MIRROR" \
        || die "mmdebstrap failed; check access to $DEBIAN_MIRROR (set DEBIAN_MIRROR to another mirror)"
      mv "${tarball%.tar}.partial.tar" "$tarball"
    fi
    ctr_id="$(buildah from scratch)"
    buildah add --quiet "$ctr_id" "$tarball" / >/dev/null
    buildah config --cmd python3 --env LANG=C.UTF-8 "$ctr_id"
    buildah commit --quiet --rm "$ctr_id" "$base" >/dev/null
    log "base image $base committed"
  else
    log "base image $base cached"
  fi
fi

# The wheels must match the base's python: same minor version as the host python that builds them.
host_py="$( [ -x "$ROOT/.venv/bin/python" ] && echo "$ROOT/.venv/bin/python" || command -v python3 )"
host_minor="$("$host_py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
probe_ctr="$(buildah from --quiet --pull-never "$base")"
base_minor="$(buildah run --network none "$probe_ctr" \
  python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")' 2>/dev/null | tail -n1 || true)"
buildah rm "$probe_ctr" >/dev/null 2>&1 || true
if [ -n "$base_minor" ] && [ "$base_minor" != "$host_minor" ]; then
  die "base image $base has python $base_minor but the host builds wheels with python $host_minor; use a base with python $host_minor"
fi

# ---------------------------------------------------------------- wheelhouse
log "building wheels with $host_py (python $host_minor)"
rm -rf "$WHEELHOUSE"
mkdir -p "$WHEELHOUSE"
(cd "$ROOT" && "$host_py" -m pip wheel --quiet --wheel-dir "$WHEELHOUSE" . pip) \
  || die "pip wheel failed; the project or one of its dependencies does not build (see above)"
log "wheelhouse: $(find "$WHEELHOUSE" -name '*.whl' | wc -l) wheels"

# ---------------------------------------------------------------- image
log "building $FULL_IMAGE"
buildah bud --quiet --layers --network none --pull-never \
  --build-arg "BASE_IMAGE=$base" -t "$FULL_IMAGE" -f "$ROOT/Dockerfile" "$ROOT" \
  || die "buildah bud failed (see above)"
log "built $FULL_IMAGE"
buildah images --format '{{.Name}}:{{.Tag}} {{.Size}}' "$FULL_IMAGE" 2>/dev/null | sed 's/^/    /' || true

# ---------------------------------------------------------------- containerd
if [ -S "$CONTAINERD_SOCK" ] && ctr --address "$CONTAINERD_SOCK" version >/dev/null 2>&1; then
  buildah push --quiet "$FULL_IMAGE" "docker-archive:$tmp/image.tar:$FULL_IMAGE" >/dev/null \
    || die "exporting $FULL_IMAGE from buildah failed"
  ctr_k8s images import "$tmp/image.tar" >/dev/null || die "importing $FULL_IMAGE into containerd failed"
  log "imported $FULL_IMAGE into the local cluster's containerd (pods: image: $IMAGE, imagePullPolicy: IfNotPresent)"
else
  log "local cluster's containerd is not running: run 'make cluster-up' then 'make image' to import the image"
fi
