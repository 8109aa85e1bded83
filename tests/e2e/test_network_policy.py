"""NetworkPolicy is enforced on the node: what a policy denies is refused, and allowed again once it goes.

Real pods on the real node, the cluster's enforcer (on the local cluster kube-router, hack/cluster/up.sh) and
probe pods that connect on the test's behalf (tests/support/netprobe.py). The enforcer acts on a watch event, not
at once: each change is polled for until it shows, and the time it took must stay under POLICY_EFFECT_BOUND_S.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client
from tests.conftest import wait_until
from tests.support.netprobe import (
    POLICY_EFFECT_BOUND_S,
    PROBE_PORT,
    allowed,
    api_server_addresses,
    denied,
    from_node,
    probe_pod,
    start_probes,
    until_outcome,
)

pytestmark = [pytest.mark.cluster, pytest.mark.kubelet]


def _policy(name: str, selector: dict[str, str], kind: str) -> dict[str, Any]:
    """A policy that isolates the selected pods for `kind` (Ingress or Egress) and allows nothing."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name},
        "spec": {"podSelector": {"matchLabels": selector}, "policyTypes": [kind]},
    }


def test_a_connection_the_policy_denies_is_refused_and_allowed_again_once_the_policy_goes(
    kube_api: Any, namespace: str, project_image: str
) -> None:
    core = client.CoreV1Api(kube_api)
    server, visitor = start_probes(
        core,
        project_image,
        (namespace, "server", {"role": "server"}),
        (namespace, "visitor", {"role": "visitor"}),
    )
    until_outcome("the visitor reaching the server before any policy",
                  lambda: visitor.connect(server.ip, PROBE_PORT), allowed)  # fmt: skip

    net = client.NetworkingV1Api(kube_api)
    net.create_namespaced_network_policy(namespace, _policy("server-closed", {"role": "server"}, "Ingress"))
    outcome, took_deny = until_outcome(
        "the server's ingress closed", lambda: visitor.connect(server.ip, PROBE_PORT), denied
    )
    print(f"\npolicy created: {visitor} -> {server} {outcome} after {took_deny:.3f}s")
    # The node may always reach its pods, isolated or not: the kubelet's probes, operators and gateways run there.
    assert from_node(server.ip, PROBE_PORT) == "open"
    assert server.connect(visitor.ip, PROBE_PORT) == "open", (
        "the visitor is not isolated: its ingress is open"
    )

    net.delete_namespaced_network_policy("server-closed", namespace)
    outcome, took_allow = until_outcome(
        "the server's ingress open again", lambda: visitor.connect(server.ip, PROBE_PORT), allowed
    )
    print(f"policy deleted: {visitor} -> {server} {outcome} after {took_allow:.3f}s")
    assert max(took_deny, took_allow) < POLICY_EFFECT_BOUND_S


def test_a_pod_under_default_deny_egress_reaches_neither_the_api_server_nor_another_pod(
    kube_api: Any, namespace: str, project_image: str
) -> None:
    core = client.CoreV1Api(kube_api)
    fenced, free, server = start_probes(
        core,
        project_image,
        (namespace, "fenced", {"egress": "none"}),
        (namespace, "free", {"egress": "any"}),
        (namespace, "server", {"role": "server"}),
    )
    targets = [*api_server_addresses(kube_api), (server.ip, PROBE_PORT)]
    print(f"\ntargets: {targets}")
    for host, port in targets:
        until_outcome(f"{fenced} reaching {host}:{port} before any policy",
                      lambda h=host, p=port: fenced.connect(h, p), allowed)  # type: ignore[misc]  # fmt: skip

    client.NetworkingV1Api(kube_api).create_namespaced_network_policy(
        namespace, _policy("no-egress", {"egress": "none"}, "Egress")
    )
    took = []
    for host, port in targets:
        outcome, seconds = until_outcome(
            f"{fenced} cut off from {host}:{port}",
            lambda h=host, p=port: fenced.connect(h, p),  # type: ignore[misc]
            denied,
        )
        print(f"{fenced} -> {host}:{port}: {outcome} after {seconds:.3f}s")
        took.append(seconds)
        assert free.connect(host, port) == "open", f"{free} has no egress policy and must reach {host}:{port}"
    assert max(took) < POLICY_EFFECT_BOUND_S
    # Egress isolation leaves its ingress alone: the node and other pods still reach it.
    assert from_node(fenced.ip, PROBE_PORT) == "open"
    assert free.connect(fenced.ip, PROBE_PORT) == "open"


# From the container's first instruction: connect to the target every 20 ms for SECONDS, print each outcome with
# the time since the start. kube-router learns a pod's IP only after its containers have started.
FIRST_PACKETS = """
import socket, sys, time
host, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
start = time.monotonic()
while time.monotonic() - start < seconds:
    try:
        socket.create_connection((host, port), timeout=0.2).close()
        outcome = "open"
    except ConnectionRefusedError:
        outcome = "refused"
    except TimeoutError:
        outcome = "timeout"
    print(f"{time.monotonic() - start:.3f} {outcome}", flush=True)
    time.sleep(0.02)
"""
# Longer than the measured window before kube-router has a new pod's chain (0.2-1 s).
FIRST_SECONDS = 4.0


def _first_packets(core: Any, namespace: str, name: str, image: str, labels: dict[str, str],
                   target: tuple[str, int]) -> list[tuple[float, str]]:  # fmt: skip
    """What a new pod's connections to `target` gave, from its start on: (seconds since start, outcome)."""
    pod = probe_pod(name, image, labels)
    pod["spec"]["restartPolicy"] = "Never"
    pod["spec"]["containers"][0]["command"] = ["python3", "-c", FIRST_PACKETS, target[0], str(target[1]),
                                               str(FIRST_SECONDS)]  # fmt: skip
    core.create_namespaced_pod(namespace, pod)

    def ended() -> str | None:
        phase = core.read_namespaced_pod(name, namespace).status.phase
        assert phase != "Failed", core.read_namespaced_pod_log(name, namespace)
        return phase if phase == "Succeeded" else None

    wait_until(f"pod {name} done", ended, timeout=120)
    lines = core.read_namespaced_pod_log(name, namespace).split()
    return [(float(at), outcome) for at, outcome in zip(lines[::2], lines[1::2], strict=True)]


def test_a_new_pod_under_default_deny_egress_never_reaches_the_api_server_not_even_at_its_start(
    kube_api: Any, namespace: str, project_image: str
) -> None:
    core = client.CoreV1Api(kube_api)
    client.NetworkingV1Api(kube_api).create_namespaced_network_policy(
        namespace, _policy("no-egress", {"egress": "none"}, "Egress")
    )
    target = api_server_addresses(kube_api)[-1]
    # Another pod starting now is under the same delay; let the policy itself be in force first.
    time.sleep(POLICY_EFFECT_BOUND_S / 10)
    fenced = _first_packets(core, namespace, "fenced", project_image, {"egress": "none"}, target)
    free = _first_packets(core, namespace, "free", project_image, {"egress": "any"}, target)
    opened = [at for at, outcome in fenced if outcome == "open"]
    assert not opened, f"the fenced pod reached {target} at {opened[:5]} s after its start"
    first_open = next((at for at, outcome in free if outcome == "open"), None)
    print(
        f"\n{len(fenced)} attempts of the fenced pod, none open; the free pod's network from {first_open} s"
    )
    assert first_open is not None, f"a pod without egress policy never reached {target}: {free[-5:]}"
    assert first_open < POLICY_EFFECT_BOUND_S
