#!/usr/bin/env bash
# Simulated nodes for the local cluster: a kwok controller and N fake nodes whose pods turn Running and Ready
# without a kubelet or containers (kwok's standard stages), for scale benchmarks beyond what the real node runs.
#
#   hack/cluster/kwok.sh up [--nodes N]   builds kwok if needed (cached), starts it, makes N fake nodes (default 10)
#   hack/cluster/kwok.sh down             deletes the fake nodes (and so their pods), stops kwok
#
# The fake nodes are tainted kwok.x-k8s.io/node=fake:NoSchedule and labelled type=kwok: only pods that tolerate
# the taint land there (an AgentSession through spec.podTemplate.tolerations and nodeSelector), and the real node
# keeps running everything else.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$HERE/lib.sh"

KWOK_VERSION="${KWOK_VERSION:-0.8.0}"
KWOK_DIR="$CACHE_DIR/kwok/v$KWOK_VERSION"
NODE_LABEL="type=kwok"
# Pod IPs of fake pods: a part of the cluster's range no real pod gets (the real node has 198.19.0.0/24), never
# routed anywhere; nothing connects to them (clients of fake pods use an override, e.g. the stand-in agentctl).
FAKE_POD_CIDR="198.19.128.0/17"
FAKE_NODE_IP="198.18.1.1"

usage() { echo "usage: $0 up [--nodes N] | down" >&2; exit 2; }

fake_nodes() { kc get nodes -l "$NODE_LABEL" -o name 2>/dev/null; }

node_manifest() { # name
  cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: $1
  annotations:
    node.alpha.kubernetes.io/ttl: "0"
    kwok.x-k8s.io/node: fake
  labels:
    kubernetes.io/hostname: $1
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
spec:
  taints:
  - key: kwok.x-k8s.io/node
    value: fake
    effect: NoSchedule
EOF
}

up() {
  local nodes="$1" i want=() name
  if [ ! -f "$ADMIN_KUBECONFIG" ] || ! kc get --raw /readyz >/dev/null 2>&1; then
    die "the local cluster is not up (kube-apiserver at $APISERVER_URL); run make cluster-up first"
  fi
  KWOK_VERSION="$KWOK_VERSION" "$HERE/build-kwok.sh" | sed 's/^/    /'
  [ -x "$KWOK_DIR/bin/kwok" ] || die "$KWOK_DIR/bin/kwok missing after hack/cluster/build-kwok.sh; see above"
  # Node leases of 10 s, renewed every 2.5 s as the kubelet here does: the node controller notices a silent node
  # within 16 s on this cluster (up.sh), and a node it marks NotReady has its pods marked not ready.
  start_daemon kwok "$KWOK_DIR/bin/kwok" --kubeconfig "$ADMIN_KUBECONFIG" --config "$KWOK_DIR/stages.yaml" \
    --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
    --cidr "$FAKE_POD_CIDR" --node-ip "$FAKE_NODE_IP" --node-lease-duration-seconds 10 --v WARN
  for ((i = 0; i < nodes; i++)); do want+=("kwok-node-$i"); done
  for name in $(fake_nodes); do
    name="${name#node/}"
    [[ " ${want[*]} " == *" $name "* ]] || kc delete node "$name" --wait=false >/dev/null
  done
  [ "$nodes" -gt 0 ] || { log "kwok running with no fake nodes"; return 0; }
  for name in "${want[@]}"; do node_manifest "$name"; done | kc apply -f - >/dev/null \
    || die "creating the fake nodes failed (kubectl apply above)"
  all_ready() {
    [ "$(kc get nodes -l "$NODE_LABEL" -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' \
      | grep -cx True)" -ge "$nodes" ]
  }
  wait_for "$nodes fake node(s) Ready (label $NODE_LABEL, taint kwok.x-k8s.io/node=fake:NoSchedule)" 60 kwok all_ready
}

down() {
  local names
  names="$(fake_nodes || true)"
  if [ -n "$names" ]; then
    # kwok finishes the deletion of the nodes' pods (its pod-delete stage) while it still runs.
    # shellcheck disable=SC2086
    kc delete $names --wait=true --timeout=60s >/dev/null || warn "could not delete every fake node: $names"
    log "deleted $(echo "$names" | wc -l) fake node(s)"
  fi
  if pid="$(pid_of kwok)"; then
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    log "stopped kwok"
  fi
  rm -f "$PIDS/kwok.pid"
}

case "${1:-}" in
  up)
    shift
    nodes=10
    while [ $# -gt 0 ]; do
      case "$1" in
        --nodes)
          if [ $# -lt 2 ] || ! [[ "$2" =~ ^[0-9]+$ ]]; then usage; fi
          nodes="$2"; shift 2 ;;
        *) usage ;;
      esac
    done
    up "$nodes"
    ;;
  down) down ;;
  *) usage ;;
esac
