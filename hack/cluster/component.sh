#!/usr/bin/env bash
# Stops or starts one component of the running local cluster, e.g. to see what sessions show while the node's
# kubelet is down:
#
#   hack/cluster/component.sh stop NAME      SIGTERM, SIGKILL after 10 s; its pid file goes
#   hack/cluster/component.sh start NAME     runs up.sh, which starts what is not running and waits for the cluster
#   hack/cluster/component.sh restart NAME
#
# NAME is one of lib.sh's COMPONENTS. Starting goes through up.sh so that each component has one command line,
# there; up.sh leaves running components alone, so `start` also brings back anything else that had stopped.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib.sh
source "$HERE/lib.sh"

usage() { echo "usage: $0 stop|start|restart NAME (NAME: ${COMPONENTS[*]})" >&2; exit 2; }

[ $# -eq 2 ] || usage
action="$1" name="$2"
[[ " ${COMPONENTS[*]} " == *" $name "* ]] || usage

stop() {
  is_running "$name" || { log "$name is not running"; return 0; }
  stop_components 10 "$name"
}

start() {
  "$HERE/up.sh" | sed 's/^/    /'
  is_running "$name" || die "$name is not running after hack/cluster/up.sh; log: $LOGS/$name.log"
}

case "$action" in
  stop) stop ;;
  start) start ;;
  restart) stop; start ;;
  *) usage ;;
esac
