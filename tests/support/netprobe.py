"""Pods that try TCP connections on the tests' behalf, for tests of what NetworkPolicy lets through on a node.

A probe pod runs a small HTTP server (the project image's python3, standard library only). The test, on the node,
asks it `GET /connect?host=H&port=P` and it answers what a TCP connect from inside the pod to H:P gave: `open`,
`refused`, `timeout` or `error:<errno>`. Asking costs a few milliseconds, where a `kubectl exec` costs a second,
so a test can poll until the policy it changed takes effect and measure how long that took. The node itself may
always reach its pods (the enforcer accepts traffic whose source is local), so the test's own requests are never
the ones a policy stops; and the probe's own port is a target for other probes, so one kind of pod serves both
ends.
"""

from __future__ import annotations

import socket
import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any, Final

import pytest
from kubernetes import client

from tests.conftest import wait_until

PROBE_PORT: Final = 8080
# One connect attempt: a REJECT answers at once (refused), but the kernel sends at most a burst of such answers to
# one peer, then one a second (net.ipv4.icmp_ratelimit); the others, like a DROP, show as a timeout after this long.
CONNECT_TIMEOUT_S: Final = 1.0
POD_START_TIMEOUT_S: Final = 120.0
# The enforcer applies a policy change asynchronously (kube-router: on the watch event, one full iptables sync);
# measured well under a second on the local cluster (docs/egress/enforcer.md), so this bound is loose.
POLICY_EFFECT_BOUND_S: Final = 10.0
OPEN: Final = "open"

SERVER = f"""
import http.server, socket, urllib.parse

class Probe(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        query = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
        target = (query["host"][0], int(query["port"][0]))
        try:
            socket.create_connection(target, timeout={CONNECT_TIMEOUT_S}).close()
            outcome = "open"
        except ConnectionRefusedError:
            outcome = "refused"
        except TimeoutError:
            outcome = "timeout"
        except OSError as error:
            outcome = f"error:{{error.errno}}"
        body = outcome.encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

http.server.ThreadingHTTPServer(("0.0.0.0", {PROBE_PORT}), Probe).serve_forever()
"""


def probe_pod(name: str, image: str, labels: dict[str, str]) -> dict[str, Any]:
    """A probe pod that the `restricted` Pod Security level admits."""
    security = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
    }
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 65532,
                "runAsGroup": 65532,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "probe",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["python3", "-c", SERVER],
                    "ports": [{"name": "probe", "containerPort": PROBE_PORT}],
                    "securityContext": security,
                    "resources": {
                        "requests": {"cpu": "10m", "memory": "32Mi"},
                        "limits": {"cpu": "200m", "memory": "64Mi"},
                    },
                }
            ],
        },
    }


class Probe:
    """A running probe pod: where it is, and what it reaches."""

    def __init__(self, namespace: str, name: str, ip: str) -> None:
        self.namespace, self.name, self.ip = namespace, name, ip

    def __repr__(self) -> str:
        return f"{self.namespace}/{self.name} ({self.ip})"

    def connect(self, host: str, port: int) -> str:
        """What a TCP connect from this pod to host:port gives now."""
        query = urllib.parse.urlencode({"host": host, "port": port})
        url = f"http://{self.ip}:{PROBE_PORT}/connect?{query}"
        with urllib.request.urlopen(url, timeout=CONNECT_TIMEOUT_S + 5) as answer:
            return str(answer.read().decode())


def from_node(host: str, port: int) -> str:
    """What a TCP connect from the node (this process) to host:port gives now, in the probes' words."""
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S).close()
    except ConnectionRefusedError:
        return "refused"
    except TimeoutError:
        return "timeout"
    except OSError as error:
        return f"error:{error.errno}"
    return OPEN


def start_probes(core: client.CoreV1Api, image: str, *pods: tuple[str, str, dict[str, str]]) -> list[Probe]:
    """Creates the probe pods (namespace, name, labels) and returns them once each answers the node."""
    for namespace, name, labels in pods:
        core.create_namespaced_pod(namespace, probe_pod(name, image, labels))
    probes = []
    for namespace, name, _ in pods:

        def running(namespace: str = namespace, name: str = name) -> Probe | None:
            pod = core.read_namespaced_pod(name, namespace)
            assert pod.status.phase not in ("Failed", "Succeeded"), f"probe pod {name} ended: {pod.status}"
            return Probe(namespace, name, pod.status.pod_ip) if pod.status.pod_ip else None

        probe = wait_until(f"probe pod {namespace}/{name} running", running, timeout=POD_START_TIMEOUT_S)
        wait_until(f"probe pod {probe} answering", lambda p=probe: p.connect("127.0.0.1", PROBE_PORT) == OPEN)
        probes.append(probe)
    return probes


def until_outcome(
    what: str,
    attempt: Callable[[], str],
    expected: Callable[[str], bool],
    bound_s: float = POLICY_EFFECT_BOUND_S,
) -> tuple[str, float]:
    """Repeats `attempt` until its outcome is `expected`; the outcome and the seconds it took. Fails after
    `bound_s` with the last outcome: the enforcer did not act within its bound."""
    start = time.monotonic()
    outcome = attempt()
    while not expected(outcome):
        elapsed = time.monotonic() - start
        if elapsed > bound_s:
            pytest.fail(
                f"{what}: still {outcome!r} after {elapsed:.1f}s; is a NetworkPolicy enforcer running? (the local "
                "cluster's is kube-router, started by hack/cluster/up.sh; see logs/kube-router.log)",
                pytrace=False,
            )
        time.sleep(0.05)
        outcome = attempt()
    return outcome, time.monotonic() - start


def denied(outcome: str) -> bool:
    return outcome != OPEN


def allowed(outcome: str) -> bool:
    return outcome == OPEN


def api_server_addresses(kube_api: Any) -> list[tuple[str, int]]:
    """The API server as pods reach it: the `kubernetes` Service's address and each address behind it."""
    service = client.CoreV1Api(kube_api).read_namespaced_service("kubernetes", "default")
    found = [(str(service.spec.cluster_ip), int(service.spec.ports[0].port))]
    slices = client.DiscoveryV1Api(kube_api).list_namespaced_endpoint_slice(
        "default", label_selector="kubernetes.io/service-name=kubernetes"
    )
    for piece in slices.items:
        port = int(piece.ports[0].port)
        found += [(str(address), port) for endpoint in piece.endpoints for address in endpoint.addresses]
    return found
