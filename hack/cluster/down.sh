#!/usr/bin/env bash
# Stops the local cluster that up.sh started and removes what it left on the host: containers, pod network
# namespaces, mounts, the pod bridge, kube-proxy's and kube-router's iptables rules (and kube-router's ipsets) and
# the node address. Cluster data (etcd, pods)
# goes too, so the next up.sh starts clean; certificates, built binaries and imported images stay cached.
#
# Safe to run twice and from a shell `trap`: it keeps going past individual failures and exits 0 unless something
# it started is still running at the end.
#   --purge   also delete the whole cluster directory (certificates and containerd images included)
set -uo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$HERE/lib.sh"
PURGE=0
[ "${1:-}" = "--purge" ] && PURGE=1

[ -d "$CLUSTER_DIR" ] || { log "no cluster state in $CLUSTER_DIR; nothing to stop"; exit 0; }

# kwok (simulated nodes, hack/cluster/kwok.sh) first: its fake nodes and pods go with etcd's data.
stop_components 5 kwok
# The kubelet would restart containers as they are removed; stop it (and kube-proxy, kube-router) first.
stop_components 10 kube-router kube-proxy kubelet

# Pod sandboxes and containers: kill and remove them through containerd while it still runs, so their shims exit and
# their snapshots are released. Each sandbox's network namespace is noted for removal below.
netns_paths=()
# After a crash or a killed session containerd is gone but its containers are still recorded: start it alone
# (no kubelet) so they can be removed the same way.
if ! is_running containerd && [ -f "$CLUSTER_DIR/containerd.toml" ] \
   && [ -d "$CONTAINERD_ROOT/io.containerd.metadata.v1.bolt" ] && command -v containerd >/dev/null; then
  start_daemon containerd containerd --config "$CLUSTER_DIR/containerd.toml"
  for _ in $(seq 1 100); do ctr --address "$CONTAINERD_SOCK" version >/dev/null 2>&1 && break; sleep 0.1; done
fi
if is_running containerd; then
  for id in $(ctr_k8s containers ls -q 2>/dev/null); do
    ns="$(ctr_k8s containers info "$id" 2>/dev/null | python3 -c '
import json, sys
try:
    spec = json.load(sys.stdin).get("Spec") or {}
except ValueError:
    sys.exit(0)
for n in (spec.get("linux") or {}).get("namespaces") or []:
    if n.get("type") == "network" and n.get("path"):
        print(n["path"])
')"
    [ -n "$ns" ] && netns_paths+=("$ns")
    ctr_k8s tasks kill -s SIGKILL "$id" >/dev/null 2>&1
  done
  for id in $(ctr_k8s containers ls -q 2>/dev/null); do
    for _ in $(seq 1 50); do
      status="$(ctr_k8s tasks ls 2>/dev/null | awk -v id="$id" '$1 == id {print $3}')"
      [ -z "$status" ] || [ "$status" = STOPPED ] && break
      sleep 0.1
    done
    ctr_k8s tasks delete -f "$id" >/dev/null 2>&1
    ctr_k8s containers delete "$id" >/dev/null 2>&1 || warn "could not remove container $id"
  done
  [ ${#netns_paths[@]} -gt 0 ] && log "removed pod containers"
fi
stop_components 10 containerd
# A shim whose task could not be deleted outlives containerd; only shims of this cluster's socket are touched.
for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $CONTAINERD_SOCK" 2>/dev/null); do
  warn "killing leftover containerd shim $pid"
  kill -KILL "$pid" 2>/dev/null
done

# Namespaces whose container record was already gone: a pod namespace of this cluster is one whose eth0 is the
# peer of a veth on this cluster's bridge.
if ip link show "$BRIDGE" >/dev/null 2>&1; then
  for ns in /var/run/netns/cni-*; do
    [ -e "$ns" ] || continue
    peer="$(ip -n "$(basename "$ns")" -o link show eth0 2>/dev/null | sed -n 's/^[0-9]*: eth0@if\([0-9]*\):.*/\1/p')"
    [ -n "$peer" ] && ip -o link show master "$BRIDGE" 2>/dev/null | grep "^$peer: " >/dev/null && netns_paths+=("$ns")
  done
fi
for ns in "${netns_paths[@]}"; do
  umount "$ns" 2>/dev/null
  rm -f "$ns"
done
# Every mount below the cluster directory (pod volumes, container root filesystems), deepest first.
mapfile -t mounts < <(awk -v d="$CLUSTER_DIR/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r)
for m in "${mounts[@]}"; do
  umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || warn "could not unmount $m"
done
[ ${#mounts[@]} -gt 0 ] && log "unmounted ${#mounts[@]} mounts"

stop_components 5 volume-provisioner kube-scheduler kube-controller-manager
# Last, so no client of ours holds a watch open while it drains; its data is discarded, so its grace is short.
stop_components 2 kube-apiserver
stop_components 10 etcd

# kube-router's NetworkPolicy rules: the jumps from INPUT, FORWARD and OUTPUT to its KUBE-ROUTER-* chains, those
# chains, the per-policy and per-pod chains (KUBE-NWPLCY-*, KUBE-POD-FW-*) and the ipsets they match (KUBE-SRC-*,
# KUBE-DST-*). Not `kube-router --cleanup-config`: that also flushes every IPVS service of the host and destroys
# every ipset, kube-router's or not. It keeps no state outside the filter table and these sets.
kube_router_chains() {
  iptables -t filter -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-(ROUTER|NWPLCY|POD-FW)-/ {print $2}'
}
# The number of the first rule of a built-in chain that jumps to kube-router's chains (its comment has spaces and
# quotes, so the rule is deleted by number).
kube_router_jump() {
  iptables -t filter -L "$1" -n --line-numbers 2>/dev/null | awk '$2 ~ /^KUBE-ROUTER-/ {print $1; exit}'
}
if [ -n "$(kube_router_chains)" ]; then
  for builtin in INPUT FORWARD OUTPUT; do
    while n="$(kube_router_jump "$builtin")" && [ -n "$n" ]; do iptables -t filter -D "$builtin" "$n" || break; done
  done
  for chain in $(kube_router_chains); do iptables -t filter -F "$chain" 2>/dev/null; done
  for chain in $(kube_router_chains); do
    iptables -t filter -X "$chain" 2>/dev/null || warn "could not remove iptables chain $chain"
  done
  log "removed kube-router iptables rules"
fi
for chain in INPUT FORWARD; do while iptables -D "$chain" "${POD_GUARD_RULE[@]}" 2>/dev/null; do :; done; done
if command -v ipset >/dev/null; then
  sets="$(ipset list -n 2>/dev/null | grep -E '^KUBE-(SRC|DST)-')"
  for set in $sets; do ipset destroy "$set" 2>/dev/null || warn "could not destroy ipset $set"; done
  [ -n "$sets" ] && log "removed kube-router ipsets"
fi

if [ -x "$K8S_BIN/kube-proxy" ] && iptables-save 2>/dev/null | grep KUBE- >/dev/null; then
  timeout 30 "$K8S_BIN/kube-proxy" --cleanup >/dev/null 2>&1 || warn "kube-proxy --cleanup failed"
  # kube-proxy leaves the rules the kubelet owns and its own canary chains; they start with KUBE- as well.
  for table in filter nat mangle; do
    for chain in $(iptables -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}'); do
      iptables -t "$table" -S 2>/dev/null | awk -v c="$chain" '$1 == "-A" && $0 ~ ("-j " c "( |$)") {print}' \
        | while read -r rule; do
            # shellcheck disable=SC2086
            iptables -t "$table" ${rule/-A/-D} 2>/dev/null
          done
    done
    for chain in $(iptables -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}'); do
      iptables -t "$table" -F "$chain" 2>/dev/null
    done
    for chain in $(iptables -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}'); do
      iptables -t "$table" -X "$chain" 2>/dev/null
    done
  done
  log "removed kube-proxy iptables rules"
fi

ip link show "$BRIDGE" >/dev/null 2>&1 && { ip link delete "$BRIDGE" && log "removed bridge $BRIDGE"; }
while iptables -t mangle -D FORWARD -i "$BRIDGE" ! -o "$BRIDGE" -j DROP 2>/dev/null; do :; done
ip -4 addr show dev lo | grep "inet $NODE_IP/" >/dev/null && { ip addr del "$NODE_IP/32" dev lo && log "removed $NODE_IP from lo"; }

rm -rf "$CLUSTER_DIR/etcd" "$CLUSTER_DIR/volumes" "$KUBELET_ROOT" "$CLUSTER_DIR/pod-logs" "$CLUSTER_DIR/cni/ipam" "$CONTAINERD_STATE" \
  "$CLUSTER_DIR/apiserver-certs" 2>/dev/null || warn "could not remove some cluster data under $CLUSTER_DIR"
if [ "$PURGE" = 1 ]; then
  rm -rf "$CLUSTER_DIR" && log "purged $CLUSTER_DIR"
fi

left=()
for c in "${COMPONENTS[@]}"; do is_running "$c" && left+=("$c"); done
if [ ${#left[@]} -gt 0 ]; then
  printf 'ERROR: still running: %s\n' "${left[*]}" >&2
  exit 1
fi
log "cluster down"
