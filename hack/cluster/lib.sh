# Shared settings and helpers for the local single-node cluster (sourced by up.sh, down.sh, kubeconfig.sh).
# shellcheck disable=SC2034  # settings used by the scripts that source this file
# shellcheck shell=bash

K8S_VERSION="${K8S_VERSION:-1.34.4}"
CACHE_DIR="${AGENTSESSION_CACHE:-$HOME/.cache/agentsession}"
K8S_BIN="$CACHE_DIR/kubernetes/v$K8S_VERSION/bin"
KUBE_ROUTER_VERSION="${KUBE_ROUTER_VERSION:-2.1.0}"
KUBE_ROUTER_BIN="$CACHE_DIR/kube-router/v$KUBE_ROUTER_VERSION/bin"
TOOLS_BIN="$CACHE_DIR/bin"
CLUSTER_DIR="${AGENTSESSION_CLUSTER_DIR:-$CACHE_DIR/cluster}"

PKI="$CLUSTER_DIR/pki"
LOGS="$CLUSTER_DIR/logs"
PIDS="$CLUSTER_DIR/pids"
RUN="$CLUSTER_DIR/run"
ADMIN_KUBECONFIG="$CLUSTER_DIR/admin.kubeconfig"

# The kernel here has no dummy link type, and the kubelet refuses a 127/8 node IP, so the node gets an address
# from the benchmarking range (198.18.0.0/15, never routed) on the loopback device. Pods and services use the same
# range; the pod routes cover only that range, so nothing a pod sends can leave this machine.
NODE_NAME="${AGENTSESSION_NODE_NAME:-agentsession-node}"
NODE_IP="${AGENTSESSION_NODE_IP:-198.18.0.1}"
SERVICE_CIDR="198.18.16.0/20"
KUBERNETES_SVC_IP="198.18.16.1"
CLUSTER_CIDR="198.19.0.0/16"
POD_CIDR="198.19.0.0/24"
POD_GATEWAY="198.19.0.1"
LOCAL_RANGE="198.18.0.0/15"
BRIDGE="agsbr0"
CNI_NETWORK="agentsession"
CNI_BIN_DIR="/usr/lib/cni"

ETCD_CLIENT_PORT="${AGENTSESSION_ETCD_PORT:-2379}"
ETCD_PEER_PORT="${AGENTSESSION_ETCD_PEER_PORT:-2380}"
APISERVER_PORT="${AGENTSESSION_APISERVER_PORT:-6443}"
APISERVER_URL="https://$NODE_IP:$APISERVER_PORT"
# kube-router's health port binds every interface, so it is off; its metrics server, which can bind loopback alone,
# serves /healthz as well.
KUBE_ROUTER_METRICS_PORT="${AGENTSESSION_KUBE_ROUTER_METRICS_PORT:-20244}"
# Appended to INPUT and FORWARD (up.sh): new connections from pods that kube-router has no chain for yet. Dropped,
# not refused: the client's TCP sends its SYN again a second later, when kube-router has the pod's chain, so a pod
# that connects at once is delayed, not failed, and its policy still decides.
POD_GUARD_RULE=(-i "$BRIDGE" -m conntrack --ctstate NEW -m comment --comment "agentsession: pod not yet seen by kube-router"
  -j DROP)

CONTAINERD_SOCK="$RUN/containerd.sock"
CONTAINERD_ROOT="$CLUSTER_DIR/containerd"
CONTAINERD_STATE="$RUN/containerd-state"
PAUSE_IMAGE="localhost/agentsession/pause:3.10"
KUBELET_ROOT="$CLUSTER_DIR/kubelet"

# Start order; down.sh stops them in reverse. kube-router is the NetworkPolicy enforcer (its firewall alone).
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler volume-provisioner containerd kubelet kube-proxy
  kube-router)

_t0_ms="${_t0_ms:-$(( $(date +%s%N) / 1000000 ))}"
elapsed() { local ms=$(( $(date +%s%N) / 1000000 - _t0_ms )); printf '%d.%d' $((ms / 1000)) $((ms % 1000 / 100)); }
log() { printf '[%6ss] %s\n' "$(elapsed)" "$*"; }
die() { printf 'ERROR: %s\n' "$*" >&2; exit 1; }
warn() { printf 'WARNING: %s\n' "$*" >&2; }

# The pid recorded at start, if that process still runs the component: pids are reused quickly here, so a bare
# `kill -0` could mistake an unrelated process for a component.
pid_of() {
  local f="$PIDS/$1.pid" pid argv0=""
  [ -f "$f" ] || return 1
  pid="$(cat "$f")"
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  IFS= read -r -d '' argv0 <"/proc/$pid/cmdline" 2>/dev/null || true
  if [ "${argv0##*/}" != "$1" ]; then
    # Components written in Python run as `python3 .../<name with underscores>.py`.
    tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -x ".*/${1//-/_}\.py" >/dev/null || return 1
  fi
  echo "$pid"
}

is_running() { pid_of "$1" >/dev/null; }

# Starts a daemon in its own session so it outlives the calling shell (make, a CI step, a test harness).
start_daemon() {
  local name="$1"; shift
  if is_running "$name"; then log "$name already running (pid $(pid_of "$name"))"; return 0; fi
  mkdir -p "$LOGS" "$PIDS"
  setsid "$@" </dev/null >>"$LOGS/$name.log" 2>&1 &
  echo $! >"$PIDS/$name.pid"
  log "started $name (pid $!, log $LOGS/$name.log)"
}

# Waits for a command to succeed; on timeout shows the component's log tail so the failure is visible.
wait_for() {
  local what="$1" timeout="$2" logname="$3"; shift 3
  local deadline=$(( $(date +%s) + timeout ))
  until "$@" >/dev/null 2>&1; do
    if [ -n "$logname" ] && ! is_running "$logname"; then
      tail -n 30 "$LOGS/$logname.log" >&2 || true
      die "$logname exited while waiting for $what; full log: $LOGS/$logname.log"
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      [ -n "$logname" ] && tail -n 30 "$LOGS/$logname.log" >&2
      die "timed out after ${timeout}s waiting for $what${logname:+; log: $LOGS/$logname.log}"
    fi
    sleep 0.2
  done
  log "$what"
}

kubectl_bin() {
  if [ -x "$TOOLS_BIN/kubectl" ]; then echo "$TOOLS_BIN/kubectl"; else command -v kubectl; fi
}

kc() { "$(kubectl_bin)" --kubeconfig "$ADMIN_KUBECONFIG" "$@"; }

ctr_k8s() { ctr --address "$CONTAINERD_SOCK" --namespace k8s.io "$@"; }

# A component that exited stays a zombie until init reaps it, which here can take seconds: that counts as gone.
alive() {
  local state
  state="$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

# Sends SIGTERM to the named components together, then SIGKILL to any still running after `grace` seconds; their pid
# files go. down.sh discards the cluster's data anyway, so a long graceful drain would buy nothing.
stop_components() {
  local grace="$1" name pid pending=()
  shift
  for name in "$@"; do
    if pid="$(pid_of "$name")"; then kill -TERM "$pid" 2>/dev/null; pending+=("$name:$pid"); fi
  done
  [ ${#pending[@]} -eq 0 ] && return 0
  local deadline=$(( $(date +%s%N) / 1000000 + grace * 1000 )) alive
  while :; do
    alive=0
    for entry in "${pending[@]}"; do alive "${entry#*:}" && alive=1; done
    [ $alive = 0 ] && break
    if [ $(( $(date +%s%N) / 1000000 )) -ge $deadline ]; then
      for entry in "${pending[@]}"; do
        alive "${entry#*:}" || continue
        warn "${entry%%:*} (pid ${entry#*:}) still running ${grace}s after SIGTERM; sending SIGKILL"
        kill -KILL "${entry#*:}" 2>/dev/null
      done
      for _ in $(seq 1 50); do
        alive=0
        for entry in "${pending[@]}"; do alive "${entry#*:}" && alive=1; done
        [ $alive = 0 ] && break
        sleep 0.1
      done
      break
    fi
    sleep 0.1
  done
  for entry in "${pending[@]}"; do rm -f "$PIDS/${entry%%:*}.pid"; log "stopped ${entry%%:*}"; done
}
