# Shared by the image builds (build.sh, build-agents.sh): buildah settings, Debian bases made with mmdebstrap,
# image names as the kubelet asks for them, and the import into the local cluster's containerd.
# shellcheck shell=bash
# shellcheck disable=SC2034  # settings used by the scripts that source this file

IMAGE_LIB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$IMAGE_LIB_DIR/../.." && pwd)"
# shellcheck source=../cluster/lib.sh
source "$ROOT/hack/cluster/lib.sh"

DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
IMAGES_CACHE="$CACHE_DIR/images"

# buildah stores "name:tag" as localhost/name:tag, a pod's image "name:tag" means docker.io/library/name:tag:
# build under the name the kubelet will ask for.
full_name() {
  local ref="$1" first="${1%%/*}"
  if [[ "$ref" != */* ]]; then echo "docker.io/library/$ref"
  elif [[ "$first" != *.* && "$first" != *:* && "$first" != localhost ]]; then echo "docker.io/$ref"
  else echo "$ref"; fi
}

# Checks the tools, and makes a scratch dir ($tmp, removed on exit) holding the containers.conf buildah reads.
image_build_setup() {
  local c
  for c in buildah mmdebstrap; do
    command -v "$c" >/dev/null || { log "missing $c: running hack/tools/install.sh"; "$ROOT/hack/tools/install.sh"; break; }
  done
  tmp="$(mktemp -d)"
  # shellcheck disable=SC2064  # $tmp is fixed now; expanding it later would find it unset in a sourcing shell
  trap "rm -rf '$tmp'" EXIT
  # Root here cannot raise rlimits, and buildah's defaults ask for more than the hard limit allows.
  cat >"$tmp/containers.conf" <<'EOF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
EOF
  export CONTAINERS_CONF="$tmp/containers.conf"
}

# apt options that read Debian SUITE (main) through a private state under $IMAGES_CACHE: the host may run another
# release, and its installed packages must not count as candidates.
debian_apt_opts() {
  local dir="$IMAGES_CACHE/apt-$1"
  echo "-o Dir::Etc::SourceList=$dir/sources.list -o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists=$dir/lists"
  echo "-o Dir::State::status=$dir/status -o Dir::Cache=$dir/cache"
}

# Refreshes SUITE's package index (a no-op download when the mirror has not changed).
debian_index_update() {
  local suite="$1" dir="$IMAGES_CACHE/apt-$1"
  mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
  [ -f "$dir/status" ] || : >"$dir/status"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $DEBIAN_MIRROR $suite main" >"$dir/sources.list"
  # shellcheck disable=SC2046  # the options are words without spaces
  apt-get $(debian_apt_opts "$suite") update -qq >/dev/null 2>"$dir/update.log" \
    || die "apt-get update for $suite from $DEBIAN_MIRROR failed (log: $dir/update.log); set DEBIAN_MIRROR to another mirror"
}

# Prints "pkg-version" for each package as SUITE has it (after debian_index_update), joined by "-", for cache keys.
debian_versions() {
  local suite="$1"; shift
  local pkg ver out=""
  local -A candidate=()
  # shellcheck disable=SC2046  # the options are words without spaces
  while read -r pkg ver; do candidate[$pkg]="$ver"; done < <(apt-cache $(debian_apt_opts "$suite") policy "$@" \
    | awk '/^[^ ]/ {sub(":$", "", $1); pkg = $1} /Candidate:/ {print pkg, $2}')
  for pkg in "$@"; do
    ver="${candidate[$pkg]:-}"
    if [ -z "$ver" ] || [ "$ver" = "(none)" ]; then die "Debian $suite has no package $pkg"; fi
    out+="${out:+-}$pkg-${ver//[^A-Za-z0-9.]/_}"
  done
  echo "$out"
}

# Makes image REF from Debian SUITE with PACKAGES (comma-separated) unless buildah has it; the root filesystem
# is cached as a tarball under $IMAGES_CACHE named by TARBALL_KEY, so only a new key goes to the mirror.
debian_base() {
  local ref="$1" tarball_key="$2" suite="$3" packages="$4"
  if buildah inspect --type image "$ref" >/dev/null 2>&1; then
    log "base image $ref cached"
    return 0
  fi
  mkdir -p "$IMAGES_CACHE"
  local tarball="$IMAGES_CACHE/base-$tarball_key.tar"
  if [ ! -f "$tarball" ]; then
    log "building base $ref with mmdebstrap from $DEBIAN_MIRROR ($suite: $packages)"
    # The merged-usr hook lays out /usr itself; otherwise the usrmerge package comes in, and perl with it.
    mmdebstrap --quiet --variant=essential --include="$packages" \
      --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
      --dpkgopt='path-exclude=/usr/share/info/*' \
      "$suite" "${tarball%.tar}.partial.tar" "$DEBIAN_MIRROR" \
      || die "mmdebstrap failed; check access to $DEBIAN_MIRROR (set DEBIAN_MIRROR to another mirror)"
    mv "${tarball%.tar}.partial.tar" "$tarball"
  fi
  local ctr_id
  ctr_id="$(buildah from scratch)"
  buildah add --quiet "$ctr_id" "$tarball" / >/dev/null
  buildah config --cmd sh --env LANG=C.UTF-8 "$ctr_id"
  buildah commit --quiet --rm "$ctr_id" "$ref" >/dev/null
  log "base image $ref committed"
}

containerd_running() {
  [ -S "$CONTAINERD_SOCK" ] && ctr --address "$CONTAINERD_SOCK" version >/dev/null 2>&1
}

# Imports buildah's IMAGE (a full name) into the local cluster's containerd, where pods find it by name.
import_into_cluster() {
  local full="$1" archive="$tmp/import.tar"
  buildah push --quiet "$full" "docker-archive:$archive:$full" >/dev/null \
    || die "exporting $full from buildah failed"
  # containerd's garbage collector can remove an unreferenced layer snapshot while an import builds on it
  # ("parent snapshot ... does not exist"); the next attempt unpacks that layer again.
  local attempt
  for attempt in 1 2 3; do
    ctr_k8s images import "$archive" >/dev/null && break
    [ "$attempt" = 3 ] && die "importing $full into containerd failed 3 times"
    log "importing $full into containerd failed (attempt $attempt); trying again"
  done
  rm -f "$archive"
  log "imported $full into the local cluster's containerd"
}

print_image_size() {
  buildah images --format '{{.Name}}:{{.Tag}} {{.Size}}' "$1" 2>/dev/null | sed 's/^/    /' || true
}
