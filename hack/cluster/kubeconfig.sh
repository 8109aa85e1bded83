#!/usr/bin/env bash
# Prints the admin kubeconfig of the local cluster; the path is always the last line (scripts take `tail -n1`).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$HERE/lib.sh"
if [ ! -f "$ADMIN_KUBECONFIG" ]; then
  echo "no local cluster kubeconfig at $ADMIN_KUBECONFIG; run 'make cluster-up' first" >&2
  exit 1
fi
is_running kube-apiserver || echo "note: the local cluster is not running ('make cluster-up' starts it)" >&2
echo "$ADMIN_KUBECONFIG"
