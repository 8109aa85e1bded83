#!/usr/bin/env bash
# Brings up a single-node Kubernetes on this machine: etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, containerd + runc + CNI bridge, kubelet, kube-proxy and kube-router (NetworkPolicy enforcement).
# Idempotent: components already running are left alone, so a second run only waits for readiness.
#
# Environment:
#   AGENTSESSION_CLUSTER_DIR   state (certs, etcd data, logs, pids); default ~/.cache/agentsession/cluster
#   AGENTSESSION_CLUSTER_TIER  1 = control plane only (no containerd/kubelet/kube-proxy/kube-router); default 2
#   K8S_VERSION                Kubernetes release built and run; default 1.34.4
#   AGENTSESSION_KWOK_NODES    N > 0: also start kwok with N simulated nodes (hack/cluster/kwok.sh); default 0
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$HERE/lib.sh"
TIER="${AGENTSESSION_CLUSTER_TIER:-2}"

[ "$(id -u)" = 0 ] || die "the local cluster needs root (network setup, containerd, kubelet); run as root"

# ---------------------------------------------------------------- tools and binaries
need=(etcd openssl ip)
[ "$TIER" -ge 2 ] && need+=(containerd runc ctr iptables conntrack ipset gcc)
for c in "${need[@]}"; do
  command -v "$c" >/dev/null || { log "missing $c: running hack/tools/install.sh"; "$HERE/../tools/install.sh"; break; }
done
[ -x "$TOOLS_BIN/kubectl" ] || "$HERE/../tools/install.sh"
"$HERE/build-k8s.sh" | sed 's/^/    /'
for c in kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy; do
  [ -x "$K8S_BIN/$c" ] || die "$K8S_BIN/$c missing after hack/cluster/build-k8s.sh; see its output above"
done
if [ "$TIER" -ge 2 ]; then
  KUBE_ROUTER_VERSION="$KUBE_ROUTER_VERSION" "$HERE/build-kube-router.sh" | sed 's/^/    /'
  [ -x "$KUBE_ROUTER_BIN/kube-router" ] \
    || die "$KUBE_ROUTER_BIN/kube-router missing after hack/cluster/build-kube-router.sh; see its output above"
fi
log "tools and Kubernetes v$K8S_VERSION binaries ready"

# Nothing running but state left behind (a crash, a killed session): clean it up first so no stale pod, mount or
# namespace leaks into the new cluster.
running=0
for c in "${COMPONENTS[@]}"; do is_running "$c" && running=1; done
if [ $running = 0 ] && { [ -d "$CLUSTER_DIR/etcd" ] || compgen -G "$PIDS/*.pid" >/dev/null; }; then
  log "found state of a cluster that was not stopped cleanly: running hack/cluster/down.sh"
  "$HERE/down.sh" | sed 's/^/    /'
fi

mkdir -p "$CLUSTER_DIR" "$PKI" "$LOGS" "$PIDS" "$RUN"
chmod 700 "$CLUSTER_DIR" "$PKI"

# ---------------------------------------------------------------- certificates, keys, kubeconfigs
gen_cert() { # name subject extendedKeyUsage [subjectAltName]
  local name="$1" subj="$2" eku="$3" san="${4:-}" ext
  [ -f "$PKI/$name.crt" ] && return 0
  ext="$(mktemp)"
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$eku"
    [ -n "$san" ] && echo "subjectAltName=$san"
  } >"$ext"
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "$subj" \
    -keyout "$PKI/$name.key" -out "$PKI/$name.csr" 2>/dev/null
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
    -days 3650 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$ext" "$PKI/$name.csr"
}

write_kubeconfig() { # file cert-name
  local file="$1" cert="$2"
  [ -f "$file" ] && return 0
  (umask 077; cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: agentsession
  cluster:
    server: $APISERVER_URL
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $cert
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$cert.crt")
    client-key-data: $(base64 -w0 "$PKI/$cert.key")
contexts:
- name: agentsession
  context:
    cluster: agentsession
    user: $cert
current-context: agentsession
EOF
  )
}

# Rewriting an unchanged config would make a running component restart (kube-proxy exits when its file changes).
write_if_changed() {
  local file="$1" tmp
  tmp="$(mktemp "$file.XXXXXX")"
  cat >"$tmp"
  if cmp -s "$tmp" "$file"; then rm -f "$tmp"; else mv "$tmp" "$file"; fi
}

if [ ! -f "$PKI/ca.crt" ]; then
  (umask 077
   openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
     -subj "/CN=agentsession-local-ca" -addext "basicConstraints=critical,CA:TRUE" \
     -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
     -keyout "$PKI/ca.key" -out "$PKI/ca.crt" 2>/dev/null
   openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
   openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null)
fi
(umask 077
 gen_cert apiserver "/CN=kube-apiserver" serverAuth \
   "IP:$NODE_IP,IP:127.0.0.1,IP:$KUBERNETES_SVC_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
 gen_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
 gen_cert admin "/O=system:masters/CN=agentsession-admin" clientAuth
 gen_cert controller-manager "/CN=system:kube-controller-manager" clientAuth
 gen_cert scheduler "/CN=system:kube-scheduler" clientAuth
 gen_cert kubelet-client "/O=system:nodes/CN=system:node:$NODE_NAME" clientAuth
 gen_cert kubelet-server "/CN=$NODE_NAME" serverAuth "IP:$NODE_IP,DNS:$NODE_NAME"
 gen_cert kube-proxy "/CN=system:kube-proxy" clientAuth
 gen_cert kube-router "/CN=system:kube-router" clientAuth)
write_kubeconfig "$ADMIN_KUBECONFIG" admin
write_kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig" controller-manager
write_kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig" scheduler
write_kubeconfig "$CLUSTER_DIR/kubelet.kubeconfig" kubelet-client
write_kubeconfig "$CLUSTER_DIR/kube-proxy.kubeconfig" kube-proxy
write_kubeconfig "$CLUSTER_DIR/kube-router.kubeconfig" kube-router
log "certificates and kubeconfigs in $CLUSTER_DIR"

# ---------------------------------------------------------------- node address
ip -4 addr show dev lo | grep "inet $NODE_IP/" >/dev/null || ip addr add "$NODE_IP/32" dev lo \
  || die "cannot add $NODE_IP to lo (needs root and CAP_NET_ADMIN)"

# ---------------------------------------------------------------- etcd
start_daemon etcd etcd --name agentsession --data-dir "$CLUSTER_DIR/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
  --advertise-client-urls "http://127.0.0.1:$ETCD_CLIENT_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "agentsession=http://127.0.0.1:$ETCD_PEER_PORT" \
  --snapshot-count 10000 --quota-backend-bytes 4294967296 --log-level warn
wait_for "etcd healthy" 30 etcd curl -fsS "http://127.0.0.1:$ETCD_CLIENT_PORT/health"

# ---------------------------------------------------------------- control plane
# WatchList off: with it, the API server turns every watch from resourceVersion "" or "0" into a streamed list,
# which needs etcd's watch progress requests; etcd 3.4 has none, so such watches (kwok's, for one) fail at once and
# their clients only see changes when they list again.
start_daemon kube-apiserver "$K8S_BIN/kube-apiserver" \
  --feature-gates WatchList=false \
  --bind-address "$NODE_IP" --secure-port "$APISERVER_PORT" --advertise-address "$NODE_IP" \
  --etcd-servers "http://127.0.0.1:$ETCD_CLIENT_PORT" \
  --service-cluster-ip-range "$SERVICE_CIDR" \
  --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
  --client-ca-file "$PKI/ca.crt" \
  --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
  --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
  --kubelet-preferred-address-types InternalIP \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
  --authorization-mode Node,RBAC \
  --enable-admission-plugins NodeRestriction \
  --allow-privileged=true --profiling=false --anonymous-auth=false \
  --cert-dir "$CLUSTER_DIR/apiserver-certs" --v=1
export KUBECONFIG="$ADMIN_KUBECONFIG"
wait_for "kube-apiserver /readyz ok" 90 kube-apiserver kc get --raw /readyz

# A node that stops reporting is marked NotReady (Unknown) 16 s after its last heartbeat instead of 50 s, so what
# sessions show then can be tested in seconds; the kubelet renews its lease every 2.5 s (kubelet.yaml below).
start_daemon kube-controller-manager "$K8S_BIN/kube-controller-manager" \
  --kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig" \
  --authentication-kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig" \
  --authorization-kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port 10257 --leader-elect=false \
  --service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
  --use-service-account-credentials \
  --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
  --cluster-name agentsession --service-cluster-ip-range "$SERVICE_CIDR" --cluster-cidr "$CLUSTER_CIDR" \
  --allocate-node-cidrs=false --node-monitor-period 2s --node-monitor-grace-period 16s --profiling=false --v=1
start_daemon kube-scheduler "$K8S_BIN/kube-scheduler" \
  --kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig" \
  --authentication-kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig" \
  --authorization-kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port 10259 --leader-elect=false --profiling=false --v=1
# PersistentVolumeClaims of the default StorageClass "standard" get directories under the cluster dir.
start_daemon volume-provisioner python3 "$HERE/volume_provisioner.py" "$APISERVER_URL" "$PKI/ca.crt" \
  "$PKI/admin.crt" "$PKI/admin.key" "$CLUSTER_DIR/volumes"
# The service-account controller creating "default" proves the controller-manager is working.
wait_controller_manager() {
  wait_for "controller-manager up (default service account exists)" 60 kube-controller-manager \
    kc -n default get serviceaccount default
}

if [ "$TIER" -lt 2 ]; then
  wait_controller_manager
  log "control plane ready (tier 1); kubeconfig: $ADMIN_KUBECONFIG"
  exit 0
fi

# ---------------------------------------------------------------- pod network
if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
  ip link add "$BRIDGE" type bridge || die "cannot create bridge $BRIDGE"
fi
ip -4 addr show dev "$BRIDGE" | grep "inet $POD_GATEWAY/" >/dev/null || ip addr add "$POD_GATEWAY/24" dev "$BRIDGE"
ip link set "$BRIDGE" up
# A pod reaching a Service IP is DNATed by kube-proxy to another pod on the same bridge, which the node must forward.
# Forwarding is switched on for the bridge alone (the host's ip_forward and every other interface stay as they are),
# and a rule in the mangle table, which kube-proxy never reorders, drops anything arriving from the bridge that would
# leave by another interface: nothing a pod sends is routed off the machine.
iptables -t mangle -C FORWARD -i "$BRIDGE" ! -o "$BRIDGE" -j DROP 2>/dev/null \
  || iptables -t mangle -I FORWARD 1 -i "$BRIDGE" ! -o "$BRIDGE" -j DROP \
  || die "cannot add the rule that keeps pod traffic on $BRIDGE (iptables -t mangle)"
echo 1 >"/proc/sys/net/ipv4/conf/$BRIDGE/forwarding" || die "cannot enable forwarding on $BRIDGE"
# Replies between pods on the bridge must pass conntrack to be un-DNATed.
if [ "$(cat /proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null)" != 1 ]; then
  modprobe br_netfilter 2>/dev/null
  echo 1 >/proc/sys/net/bridge/bridge-nf-call-iptables 2>/dev/null \
    || warn "bridged traffic bypasses iptables (no br_netfilter): pods cannot reach Services backed by pods"
fi
mkdir -p "$CLUSTER_DIR/cni/net.d" "$CLUSTER_DIR/cni/ipam"
# The bridge exists already with its address, so the plugin runs with isGateway=false and leaves the host's
# ip_forward alone; pods get a route to the local range only, never a default route.
write_if_changed "$CLUSTER_DIR/cni/net.d/10-agentsession.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$CLUSTER_DIR/cni/ipam",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$POD_GATEWAY"}]],
        "routes": [{"dst": "$LOCAL_RANGE"}]
      }
    }
  ]
}
EOF

# ---------------------------------------------------------------- containerd
mkdir -p "$CONTAINERD_ROOT" "$CONTAINERD_STATE"
write_if_changed "$CLUSTER_DIR/containerd.toml" <<EOF
version = 2
root = "$CONTAINERD_ROOT"
state = "$CONTAINERD_STATE"
disabled_plugins = ["io.containerd.internal.v1.tracing", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "$CONTAINERD_SOCK"
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$CONTAINERD_ROOT/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE_IMAGE"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
  # Root here lacks CAP_SYS_RESOURCE: a negative oom_score_adj for Guaranteed pods would fail to apply.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$CLUSTER_DIR/cni/net.d"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "$(command -v runc)"
EOF
start_daemon containerd containerd --config "$CLUSTER_DIR/containerd.toml"
wait_for "containerd serving" 30 containerd ctr --address "$CONTAINERD_SOCK" version

# ---------------------------------------------------------------- pause image (built from the Kubernetes source)
if ! ctr_k8s images ls -q | grep -x "$PAUSE_IMAGE" >/dev/null; then
  pause_dir="$CACHE_DIR/pause/v$K8S_VERSION"
  if [ ! -f "$pause_dir/pause.tar" ]; then
    src="$(go env GOMODCACHE)/k8s.io/kubernetes@v$K8S_VERSION/build/pause/linux/pause.c"
    [ -f "$src" ] || die "$src missing: hack/cluster/build-k8s.sh downloads the k8s.io/kubernetes module; run it"
    mkdir -p "$pause_dir"
    gcc -Os -Wall -Werror -static -DVERSION="v3.10-agentsession" -o "$pause_dir/pause" "$src" \
      || die "building the pause binary failed (needs gcc and libc6-dev for static linking)"
    strip "$pause_dir/pause"
    python3 "$HERE/oci_image.py" "$pause_dir/pause.tar" "$PAUSE_IMAGE" /pause "$pause_dir/pause:/pause:0755"
  fi
  ctr_k8s images import "$pause_dir/pause.tar" >/dev/null || die "importing the pause image into containerd failed"
  log "pause image $PAUSE_IMAGE imported"
fi

# ---------------------------------------------------------------- kubelet
mkdir -p "$KUBELET_ROOT" "$CLUSTER_DIR/pod-logs"
write_if_changed "$CLUSTER_DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $PKI/kubelet-server.crt
tlsPrivateKeyFile: $PKI/kubelet-server.key
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
podCIDR: $POD_CIDR
podLogsDir: $CLUSTER_DIR/pod-logs
resolvConf: /etc/resolv.conf
maxPods: 60
# Root here cannot raise the open-files limit above its hard limit; the default (1000000) only logs an error.
maxOpenFiles: 20000
serializeImagePulls: false
# Shared development disks fill up; eviction would kill test pods for reasons that have nothing to do with them.
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# The lease is renewed every quarter of its duration: 2.5 s, six times within the controller-manager's grace period.
nodeLeaseDurationSeconds: 10
EOF
start_daemon kubelet "$K8S_BIN/kubelet" --config "$CLUSTER_DIR/kubelet.yaml" \
  --kubeconfig "$CLUSTER_DIR/kubelet.kubeconfig" --hostname-override "$NODE_NAME" --node-ip "$NODE_IP" \
  --root-dir "$KUBELET_ROOT" --cert-dir "$KUBELET_ROOT/pki" --v=1

# ---------------------------------------------------------------- kube-proxy
write_if_changed "$CLUSTER_DIR/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $CLUSTER_DIR/kube-proxy.kubeconfig}
mode: iptables
hostnameOverride: $NODE_NAME
clusterCIDR: $CLUSTER_CIDR
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
nodePortAddresses: ["$NODE_IP/32"]
oomScoreAdj: 0
# Zeros keep the host's conntrack sysctls as they are.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: false}
EOF
start_daemon kube-proxy "$K8S_BIN/kube-proxy" --config "$CLUSTER_DIR/kube-proxy.yaml" --v=1

wait_controller_manager
wait_for "node $NODE_NAME Ready" 120 kubelet \
  kc wait --for=condition=Ready "node/$NODE_NAME" --timeout=2s
wait_for "kube-proxy healthy" 60 kube-proxy curl -fsS http://127.0.0.1:10256/healthz

# ---------------------------------------------------------------- kube-router (NetworkPolicy enforcement)
# Only its firewall controller: no BGP router, no service proxy (kube-proxy has that), no CNI (the bridge plugin).
# It filters each local pod's traffic in INPUT, FORWARD and OUTPUT, so a policy also bounds what a pod reaches on
# the node itself, the API server included; traffic from the node to its pods is let through (kubelet probes,
# operators and gateways run on the host). It needs the node object, so it starts once the node has registered.
kc apply -f - >/dev/null <<EOF || die "creating kube-router's ClusterRole and binding failed (kubectl apply)"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "agentsession:kube-router"}
rules:
- apiGroups: [""]
  resources: [pods, namespaces, nodes, services, endpoints]
  verbs: [get, list, watch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "agentsession:kube-router"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "agentsession:kube-router"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "system:kube-router"}]
EOF
# kube-router gives a pod its chain only once the pod's IP is in the API server, which the kubelet posts after the
# containers have started: a new pod's first connections (0.2-1 s of them, measured) would pass unfiltered. So
# what a pod starts and kube-router has not decided on (only its chains decide, ACCEPT or REJECT) is refused at
# the end of INPUT and FORWARD: a new pod has no network until its policies are in force. Replies to connections
# made to it (the kubelet's probes) are not new, and pass.
for chain in INPUT FORWARD; do
  iptables -C "$chain" "${POD_GUARD_RULE[@]}" 2>/dev/null || iptables -A "$chain" "${POD_GUARD_RULE[@]}" \
    || die "cannot add the rule that refuses pods kube-router has not seen yet (iptables -A $chain)"
done
# Health port 0: it would bind every interface; the metrics server binds loopback and serves /healthz too. pprof
# (0.0.0.0:6060) stays off, as by default.
start_daemon kube-router "$KUBE_ROUTER_BIN/kube-router" --kubeconfig "$CLUSTER_DIR/kube-router.kubeconfig" \
  --run-firewall=true --run-router=false --run-service-proxy=false --run-loadbalancer=false --enable-cni=false \
  --enable-ipv4=true --enable-ipv6=false --hostname-override "$NODE_NAME" --service-cluster-ip-range "$SERVICE_CIDR" \
  --health-port 0 --metrics-addr 127.0.0.1 --metrics-port "$KUBE_ROUTER_METRICS_PORT" --enable-pprof=false --v 0
# Synced: its first full sync ran to the end (iptables-restore put the closing ACCEPT rule of its chains).
kube_router_synced() {
  curl -fsS "http://127.0.0.1:$KUBE_ROUTER_METRICS_PORT/healthz" \
    && iptables -S KUBE-ROUTER-FORWARD 2>/dev/null | grep -e "--mark 0x20000/0x20000 -j ACCEPT"
}
wait_for "kube-router enforcing NetworkPolicy" 60 kube-router kube_router_synced
if [ "${AGENTSESSION_KWOK_NODES:-0}" -gt 0 ]; then
  "$HERE/kwok.sh" up --nodes "$AGENTSESSION_KWOK_NODES" | sed 's/^/    /'
fi
log "cluster ready; kubeconfig: $ADMIN_KUBECONFIG"
