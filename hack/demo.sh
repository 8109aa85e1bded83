#!/usr/bin/env bash
# `make demo`: from a fresh clone to an agent answering a prompt through the gateway.
#   1. a cluster: $KUBECONFIG (or ~/.kube/config) when it answers, else kind when installed, else the local
#      single-node cluster of hack/cluster;
#   2. kubectl and helm (hack/tools/install.sh), the project image (hack/image/build.sh), loaded into the cluster;
#   3. `helm upgrade --install` of charts/agentsession, serving one namespace that enforces the restricted
#      Pod Security Standard;
#   4. examples/demo.yaml applied there, waited for until Ready;
#   5. a WebSocket client of the gateway (hack/demo_client.py) printing the events of one prompt;
#   6. `kubectl get ags` and the session's Events;
#   7. how to go on by hand: the web console (the gateway's `/`, through a port-forward the demo leaves running)
#      and `kubectl agentsession attach`.
# Re-runs are safe: every step converges, and the demo session is recreated so its first prompt runs again.
#
# Environment:
#   DEMO_NAMESPACE      where the session runs (default agentsession-demo)
#   RELEASE_NAMESPACE   where the chart is installed (default agentsession-system)
#   DEMO_CLUSTER        force the cluster: kubeconfig | kind | local (default: the first that works)
#   DEMO_SKIP_IMAGE=1   use the image already on the nodes
#   DEMO_DEV_MODE=1     run the gateway without authentication (by default the client presents a token of a
#                       ServiceAccount allowed to use AgentSessions in the demo namespace, and nothing else)
#   IMAGE               image reference (default agentsession:dev)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CACHE_DIR="${AGENTSESSION_CACHE:-$HOME/.cache/agentsession}"
BIN_DIR="$CACHE_DIR/bin"
DEMO_NS="${DEMO_NAMESPACE:-agentsession-demo}"
RELEASE_NS="${RELEASE_NAMESPACE:-agentsession-system}"
RELEASE=agentsession
IMAGE="${IMAGE:-agentsession:dev}"
KIND_CLUSTER=agentsession
SESSION=demo
START=$SECONDS

step() { printf '\n==> [%3ds] %s\n' "$((SECONDS - START))" "$*"; }
say() { printf '    %s\n' "$*"; }
die() { printf '\nERROR: %s\n' "$*" >&2; exit 1; }

# Runs a long command quietly, printing a line every 15 s so a slow step never looks hung; shows the tail of its
# output when it fails.
long() {
  local label="$1"; shift
  local log; log="$(mktemp)"
  "$@" >"$log" 2>&1 &
  local pid=$! t0=$SECONDS next=$((SECONDS + 15))
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if (( SECONDS >= next )); then say "... $label: $((SECONDS - t0))s"; next=$((next + 15)); fi
  done
  if ! wait "$pid"; then
    tail -n 30 "$log" | sed 's/^/    | /' >&2
    rm -f "$log"
    die "$label failed"
  fi
  grep -E '^\[|^\[install\]|imported|built ' "$log" | tail -n 4 | sed 's/^/    | /' || true
  rm -f "$log"
  say "$label: done in $((SECONDS - t0))s"
}

# ---------------------------------------------------------------- tools
step "Tools: kubectl, helm and the Python environment"
if [ ! -x "$BIN_DIR/kubectl" ] || [ ! -x "$BIN_DIR/helm" ]; then
  long "installing kubectl and helm" hack/tools/install.sh
fi
export PATH="$BIN_DIR:$PATH"
say "kubectl $(kubectl version --client -o json 2>/dev/null | sed -n 's/.*"gitVersion": *"\([^"]*\)".*/\1/p' | head -1), helm $(helm version --short 2>/dev/null)"
if [ ! -x .venv/bin/python ] || [ ! -f .venv/.installed ]; then
  long "creating .venv" make venv
fi
PY="$ROOT/.venv/bin/python"

# ---------------------------------------------------------------- cluster
step "Cluster"
answers() { kubectl --request-timeout=5s get --raw /readyz >/dev/null 2>&1; }
mode="${DEMO_CLUSTER:-}"
if [ -z "$mode" ] || [ "$mode" = kubeconfig ]; then
  if [ -z "${KUBECONFIG:-}" ] && [ -f "$HOME/.kube/config" ]; then export KUBECONFIG="$HOME/.kube/config"; fi
  if [ -n "${KUBECONFIG:-}" ] && answers; then
    mode=kubeconfig
  elif [ "$mode" = kubeconfig ]; then
    die "DEMO_CLUSTER=kubeconfig but ${KUBECONFIG:-no kubeconfig} does not answer"
  else
    mode=""
  fi
fi
if [ -z "$mode" ] && command -v kind >/dev/null 2>&1; then mode=kind; fi
[ -n "$mode" ] || mode=local
case "$mode" in
  kubeconfig)
    say "using KUBECONFIG=$KUBECONFIG (context $(kubectl config current-context 2>/dev/null || echo '?'))"
    ;;
  kind)
    export KUBECONFIG="$CACHE_DIR/kind.kubeconfig"
    if ! kind get clusters 2>/dev/null | grep -qx "$KIND_CLUSTER"; then
      long "kind create cluster $KIND_CLUSTER" kind create cluster --name "$KIND_CLUSTER" --kubeconfig "$KUBECONFIG" --wait 120s
    else
      kind export kubeconfig --name "$KIND_CLUSTER" --kubeconfig "$KUBECONFIG" >/dev/null
    fi
    say "kind cluster $KIND_CLUSTER"
    ;;
  local)
    long "starting the local cluster (make cluster-up; the first run builds Kubernetes)" make cluster-up
    KUBECONFIG="$(hack/cluster/kubeconfig.sh | tail -n1)"
    export KUBECONFIG
    say "local cluster, KUBECONFIG=$KUBECONFIG"
    ;;
  *) die "DEMO_CLUSTER must be kubeconfig, kind or local (got $mode)" ;;
esac
answers || die "the cluster's API server does not answer (KUBECONFIG=$KUBECONFIG)"
for _ in $(seq 1 60); do
  kubectl get nodes --no-headers 2>/dev/null | awk '$2 == "Ready"' | grep -q . && break
  sleep 2
done
kubectl get nodes --no-headers 2>/dev/null | awk '$2 == "Ready"' | grep -q . || die "no Ready node in the cluster"
kubectl get nodes -o wide | sed 's/^/    /'

# ---------------------------------------------------------------- image
step "Image $IMAGE"
local_kubeconfig="$CACHE_DIR/cluster/admin.kubeconfig"
if [ "${DEMO_SKIP_IMAGE:-0}" = 1 ]; then
  say "DEMO_SKIP_IMAGE=1: using the image already on the nodes"
elif [ "$mode" = local ] || { [ "$mode" = kubeconfig ] && [ "$KUBECONFIG" -ef "$local_kubeconfig" ]; }; then
  long "make image (build, then import into the cluster's containerd)" env IMAGE="$IMAGE" make image
elif [ "$mode" = kind ] || { [ "$mode" = kubeconfig ] && command -v kind >/dev/null 2>&1 \
      && kubectl config current-context | grep -q '^kind-'; }; then
  cluster_name="$KIND_CLUSTER"
  [ "$mode" = kind ] || cluster_name="$(kubectl config current-context | sed 's/^kind-//')"
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    long "docker build" docker build -t "$IMAGE" .
    long "kind load docker-image" kind load docker-image "$IMAGE" --name "$cluster_name"
  else
    long "make image (buildah)" env IMAGE="$IMAGE" make image
    archive="$(mktemp -d)/image.tar"
    long "exporting the image" buildah push "$IMAGE" "docker-archive:$archive:$IMAGE"
    long "kind load image-archive" kind load image-archive "$archive" --name "$cluster_name"
    rm -rf "$(dirname "$archive")"
  fi
else
  # Nothing here can push to the cluster's registry: build where its nodes look (Docker Desktop, minikube's
  # docker-env), or push the image yourself and run with IMAGE=registry/agentsession:tag DEMO_SKIP_IMAGE=1.
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    long "docker build" docker build -t "$IMAGE" .
  else
    long "make image" env IMAGE="$IMAGE" make image
  fi
  say "note: the nodes of this cluster must be able to find $IMAGE"
fi

# ---------------------------------------------------------------- chart
step "helm upgrade --install $RELEASE (namespace $RELEASE_NS, serving $DEMO_NS)"
for ns in "$RELEASE_NS" "$DEMO_NS"; do
  kubectl create namespace "$ns" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  # The chart's pods and the agent pod must all pass the restricted Pod Security Standard.
  kubectl label namespace "$ns" --overwrite \
    pod-security.kubernetes.io/enforce=restricted pod-security.kubernetes.io/warn=restricted >/dev/null
done
# Helm installs crds/ only on a first install and never upgrades them: apply the CRDs of this checkout, then let
# Helm skip them (Helm 4's server-side apply would otherwise conflict with an earlier applier of the CRDs).
kubectl apply --server-side --force-conflicts --field-manager agentsession-demo -f crds/ \
  | sed 's/^/    /'
kubectl wait --for=condition=Established --timeout=60s \
  crd/agentsessions.agentsession.dev crd/agentsessionpools.agentsession.dev >/dev/null
repository="${IMAGE%:*}"
tag="${IMAGE##*:}"
[ "$repository" != "$IMAGE" ] || tag=latest
# A rebuilt image keeps its tag: a changed annotation rolls the pods so a re-run serves the new build.
image_id="$(buildah images --noheading --format '{{.ID}}' "$IMAGE" 2>/dev/null | head -n1 || true)"
long "helm upgrade --install" helm upgrade --install "$RELEASE" charts/agentsession \
  --namespace "$RELEASE_NS" --create-namespace --skip-crds \
  -f charts/agentsession/ci/dev-values.yaml \
  --set "image.repository=$repository" --set "image.tag=$tag" --set image.pullPolicy=IfNotPresent \
  --set "watchNamespaces={$DEMO_NS}" \
  --set "gateway.auth.enabled=$([ "${DEMO_DEV_MODE:-0}" = 1 ] && echo false || echo true)" \
  --set-string "operator.podAnnotations.agentsession\.dev/image-id=${image_id:-unknown}" \
  --set-string "gateway.podAnnotations.agentsession\.dev/image-id=${image_id:-unknown}" \
  --wait --timeout 5m
kubectl -n "$RELEASE_NS" get pods | sed 's/^/    /'

# ---------------------------------------------------------------- session
step "AgentSession $DEMO_NS/$SESSION (examples/demo.yaml)"
kubectl -n "$DEMO_NS" delete agentsession "$SESSION" --ignore-not-found --wait=true --timeout=120s >/dev/null
# The garbage collector removes the old session's pod in the background; a new session would find it terminating.
kubectl -n "$DEMO_NS" wait --for=delete "pod/$SESSION-agent" --timeout=120s >/dev/null 2>&1 || true
kubectl -n "$DEMO_NS" apply -f examples/demo.yaml | sed 's/^/    /'
last=""
deadline=$((SECONDS + 300))
while (( SECONDS < deadline )); do
  now="$(kubectl -n "$DEMO_NS" get agentsession "$SESSION" \
    -o jsonpath='{.status.phase}/{.status.conditions[?(@.type=="Ready")].reason}' 2>/dev/null || true)"
  [ "$now" = / ] && now="(no status yet)"
  if [ "$now" != "$last" ]; then say "phase/reason: $now"; last="$now"; fi
  kubectl -n "$DEMO_NS" wait --for=condition=Ready "agentsession/$SESSION" --timeout=2s >/dev/null 2>&1 && break
done
kubectl -n "$DEMO_NS" wait --for=condition=Ready "agentsession/$SESSION" --timeout=5s | sed 's/^/    /' \
  || { kubectl -n "$DEMO_NS" describe agentsession "$SESSION" >&2; die "$SESSION did not become Ready in 300s"; }

# ---------------------------------------------------------------- gateway client
step "Gateway client: readiness, init and update events of one prompt"
# The release and the chart share the name "agentsession", so the chart's fullname is just that.
gateway_svc="$RELEASE-gateway"
# 8090 when it is free, so the web console's address is the same from run to run.
port="$("$PY" -c '
import socket
s = socket.socket()
try:
    s.bind(("127.0.0.1", 8090))
except OSError:
    s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')"
pf_log="$(mktemp)"
kubectl -n "$RELEASE_NS" port-forward "svc/$gateway_svc" --address 127.0.0.1 "$port:80" >"$pf_log" 2>&1 &
pf_pid=$!
trap 'kill "$pf_pid" 2>/dev/null || true; rm -f "$pf_log"' EXIT
url=""
for _ in $(seq 1 40); do
  if grep -q "Forwarding from" "$pf_log" && "$PY" - "$port" <<'PY' 2>/dev/null
import sys, urllib.request
urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/readyz", timeout=2)
PY
  then url="ws://127.0.0.1:$port/ws"; break; fi
  kill -0 "$pf_pid" 2>/dev/null || break
  sleep 0.5
done
if [ -z "$url" ]; then
  # Without kubelet port-forwarding, the Service's cluster IP still answers from a node of the local cluster
  # (not in dev mode: the gateway then listens on its pod's loopback only).
  [ "${DEMO_DEV_MODE:-0}" = 1 ] && die "port-forward to the gateway failed: $(tail -n1 "$pf_log")"
  kill "$pf_pid" 2>/dev/null || true
  pf_pid=""
  ip="$(kubectl -n "$RELEASE_NS" get svc "$gateway_svc" -o jsonpath='{.spec.clusterIP}')"
  say "port-forward unavailable ($(tail -n1 "$pf_log")); using the Service at $ip"
  url="ws://$ip:80/ws"
fi
console="${url%/ws}/"
console="http${console#ws}"
if [ "${DEMO_DEV_MODE:-0}" = 1 ]; then
  say "connecting to $url (dev mode: no token)"
else
  # A client identity of its own: a ServiceAccount bound to the chart's AgentSession role in the demo namespace.
  # The gateway checks its token with a TokenReview and each namespace with a SubjectAccessReview.
  kubectl -n "$DEMO_NS" create serviceaccount demo-client --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  kubectl -n "$DEMO_NS" create rolebinding demo-client --clusterrole="$RELEASE-edit" \
    --serviceaccount="$DEMO_NS:demo-client" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
  # A token for the gateway alone (the chart's default audience): it opens nothing else of the API.
  AGENTSESSION_TOKEN="$(kubectl -n "$DEMO_NS" create token demo-client --duration=10m --audience agentsession-gateway)"
  export AGENTSESSION_TOKEN
  say "connecting to $url as system:serviceaccount:$DEMO_NS:demo-client (bearer token)"
fi
"$PY" hack/demo_client.py "$url" "$DEMO_NS/$SESSION" "Please write demo.txt (this asks for permission)." \
  || die "the gateway client did not see the prompt complete"

# ---------------------------------------------------------------- summary
step "kubectl get ags -n $DEMO_NS"
kubectl -n "$DEMO_NS" get ags -o wide | sed 's/^/    /'
step "Events of agentsession/$SESSION"
# By uid: Events of an earlier session of the same name (a previous run) stay until they expire.
uid="$(kubectl -n "$DEMO_NS" get agentsession "$SESSION" -o jsonpath='{.metadata.uid}')"
kubectl -n "$DEMO_NS" get events --field-selector "involvedObject.uid=$uid" \
  --sort-by=.metadata.name -o custom-columns='TYPE:.type,REASON:.reason,MESSAGE:.message' | sed 's/^/    /'

step "Your turn: the web console and the kubectl plugin"
if [ "${DEMO_DEV_MODE:-0}" = 1 ]; then
  token_step="no token: the gateway runs in dev mode"
  as_user=""
else
  token_step="its token: kubectl -n $DEMO_NS create token demo-client --audience agentsession-gateway"
  # The demo's kubeconfig may know you by a client certificate, which the gateway cannot check: the plugin asks
  # for a token of the demo's client account instead.
  as_user=" --service-account demo-client"
fi
if [ -n "$pf_pid" ]; then
  # The port-forward outlives the demo, so the console opens at once.
  trap 'rm -f "$pf_log"' EXIT
  disown "$pf_pid"
  say "web console: open $console  ($token_step)"
  say "  through kubectl port-forward (pid $pf_pid); stop it with: kill $pf_pid"
  say "  again later: kubectl -n $RELEASE_NS port-forward svc/$gateway_svc 8090:80, then http://127.0.0.1:8090/"
else
  say "web console: open $console from a node of the cluster  ($token_step)"
fi
# The plugin: .venv/bin/kubectl-agentsession, or build/kubectl-agentsession (`make plugin`) copied onto the PATH.
say "kubectl plugin (it finds the gateway's Service and port-forwards by itself):"
say "  export PATH=\"$ROOT/.venv/bin:\$PATH\""
say "  kubectl agentsession attach $SESSION -n $DEMO_NS$as_user"
say "  kubectl agentsession prompt $SESSION -n $DEMO_NS$as_user 'Say hello'    # exit status: the stop reason"

step "Demo done in $((SECONDS - START))s"
say "kubectl -n $DEMO_NS describe ags $SESSION    # conditions and Events"
say "helm -n $RELEASE_NS test $RELEASE    # the chart's own checks"
say "helm -n $RELEASE_NS uninstall $RELEASE && kubectl delete ns $DEMO_NS    # clean up (the CRD stays)"
