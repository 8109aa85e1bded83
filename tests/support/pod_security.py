"""The `restricted` Pod Security Standard (v1.34), checked on a Pod manifest, and where a pod names a Secret.

The integration tier also lets the API server's PodSecurity admission judge real pods; this check gives the
same verdict in unit tests, with one message per violated rule.
"""

from __future__ import annotations

from typing import Any

ALLOWED_VOLUME_TYPES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret",
}  # fmt: skip
ALLOWED_SECCOMP = {"RuntimeDefault", "Localhost"}


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    spec = pod["spec"]
    pod_ctx = spec.get("securityContext") or {}
    problems: list[str] = []
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(flag):
            problems.append(f"{flag} must not be set")
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= ALLOWED_VOLUME_TYPES:
            problems.append(f"volume {volume['name']} uses a forbidden type {sorted(kinds)}")
    containers = (
        (spec.get("initContainers") or [])
        + spec.get("containers", [])
        + (spec.get("ephemeralContainers") or [])
    )
    for container in containers:
        name = container["name"]
        ctx = container.get("securityContext") or {}
        if ctx.get("privileged"):
            problems.append(f"{name}: privileged")
        if ctx.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{name}: allowPrivilegeEscalation must be false")
        caps = ctx.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            problems.append(f"{name}: capabilities must drop ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            problems.append(f"{name}: may add only NET_BIND_SERVICE")
        if not ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot")):
            problems.append(f"{name}: runAsNonRoot must be true")
        if ctx.get("runAsUser", pod_ctx.get("runAsUser")) == 0:
            problems.append(f"{name}: runAsUser must not be 0")
        seccomp = (ctx.get("seccompProfile") or pod_ctx.get("seccompProfile") or {}).get("type")
        if seccomp not in ALLOWED_SECCOMP:
            problems.append(f"{name}: seccompProfile.type must be RuntimeDefault or Localhost")
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                problems.append(f"{name}: hostPort must not be set")
    return problems


def secret_references(manifest: Any, secret: str) -> list[str]:
    """Where a manifest (plain JSON, camelCase) names the Secret: `secretKeyRef`, `secretRef`, secret volumes and
    projected sources; as paths such as `.initContainers[0].env[0].valueFrom.secretKeyRef`."""
    found: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for kind in ("secretKeyRef", "secretRef"):
                if isinstance(node.get(kind), dict) and node[kind].get("name") == secret:
                    found.append(f"{path}.{kind}")
            volume = node.get("secret")
            if isinstance(volume, dict) and secret in (volume.get("secretName"), volume.get("name")):
                found.append(f"{path}.secret")
            for key, value in node.items():
                walk(value, f"{path}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{path}[{i}]")

    walk(manifest, "")
    return found
