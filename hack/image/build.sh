#!/usr/bin/env bash
# Builds the project image with buildah, without a registry or network access inside the build:
#   1. a Debian bookworm base with python3 and the CA bundle, made with mmdebstrap from Debian's mirror (cached by python3 version),
#   2. wheels of the project (with the web console's xterm.js, hack/image/vendor-console.sh) and all its
#      dependencies, built on this host with pip,
#   3. the Dockerfile, fed that base and that wheelhouse,
# then imports the result into the local cluster's containerd (namespace k8s.io) when it runs.
#
# Environment:
#   IMAGE        tag to build (default agentsession:dev)
#   BASE_IMAGE   use this base instead of the mmdebstrap one (must carry python3.11)
#   DEBIAN_MIRROR  default http://deb.debian.org/debian
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$HERE/lib.sh"

IMAGE="${IMAGE:-agentsession:dev}"
DEBIAN_SUITE=bookworm
WHEELHOUSE="$HERE/wheelhouse"
FULL_IMAGE="$(full_name "$IMAGE")"

image_build_setup

# ---------------------------------------------------------------- base image
if [ -n "${BASE_IMAGE:-}" ]; then
  base="$BASE_IMAGE"
  log "base image $base (from BASE_IMAGE)"
else
  pyver="$(apt-cache policy python3 2>/dev/null | awk '/Candidate:/ {print $2}')"
  if [ -z "$pyver" ] || [ "$pyver" = "(none)" ]; then
    apt-get update -qq
    pyver="$(apt-cache policy python3 | awk '/Candidate:/ {print $2}')"
  fi
  [ -n "$pyver" ] || die "cannot tell Debian's python3 version (apt-cache policy python3); run apt-get update"
  key="$DEBIAN_SUITE-python3-${pyver//[^A-Za-z0-9.]/_}-ca-certificates"
  base="localhost/agentsession-base:$key"
  debian_base "$base" "$key" "$DEBIAN_SUITE" python3,ca-certificates
fi

# The wheels must match the base's python: same minor version as the host python that builds them.
host_py="$ROOT/.venv/bin/python"
[ -x "$host_py" ] || host_py="$(command -v python3)"
host_minor="$("$host_py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')"
probe_ctr="$(buildah from --quiet --pull-never "$base")"
base_minor="$(buildah run --network none "$probe_ctr" \
  python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")' 2>/dev/null | tail -n1 || true)"
buildah rm "$probe_ctr" >/dev/null 2>&1 || true
if [ -n "$base_minor" ] && [ "$base_minor" != "$host_minor" ]; then
  die "base image $base has python $base_minor but the host builds wheels with python $host_minor; use a base with python $host_minor"
fi

# ---------------------------------------------------------------- wheelhouse
# The web console's xterm.js goes into the package before the wheel is built.
"$ROOT/hack/image/vendor-console.sh"
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
print_image_size "$FULL_IMAGE"

# ---------------------------------------------------------------- containerd
if containerd_running; then
  import_into_cluster "$FULL_IMAGE"
  log "pods: image: $IMAGE, imagePullPolicy: IfNotPresent"
else
  log "local cluster's containerd is not running: run 'make cluster-up' then 'make image' to import the image"
fi
