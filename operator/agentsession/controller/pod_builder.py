"""Spec → children: the session's Pod, its agentctl token Secret and its workspace claim. Pure functions.

The Pod follows the restricted Pod Security Standard. agentctl runs as a native sidecar (an init container
with restartPolicy Always) so the kubelet starts it first and reports its readiness probe; the agent's stdio
is joined to agentctl by a FIFO pair in a shared in-memory emptyDir.

The agent and agentctl run as different users of one group (the pod's fsGroup). The workspace volume holds two
directories: the workspace, which both mount (and edit, each writing group-writable files), and agentctl's
journal, session record and terminal HOME, which only agentctl mounts. Each has a /tmp of its own.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal

from kubernetes.utils.quantity import parse_quantity

from agentsession.api.constants import (
    AGENT_CONTAINER,
    AGENTCTL_CONTAINER,
    AGENTCTL_DIR,
    DEFAULT_DRAIN_SECONDS,
    FIFO_DIR,
    LABEL_CLAIMED_FROM,
    LABEL_COMPONENT,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    LABEL_PART_OF,
    LABEL_POOL,
    LABEL_SESSION,
    MANAGER,
    SHAPE_HASH_ANNOTATION,
    STOP_REQUEST_FILE,
    STOPPED_FILE,
    TOKEN_KEY,
    TOKEN_SECRET_TYPE,
    pod_name,
    token_secret_name,
    workspace_claim_name,
)
from agentsession.api.egress import PHANTOM_DIGEST_ANNOTATION, PROVIDERS, phantom_digest
from agentsession.api.manifest import Manifest
from agentsession.api.models import AgentSessionSpec, CABundleSource, ResourceRequirements
from agentsession.api.session_ref import SessionRef
from agentsession.contract.wire import AGENT_HEALTH_PATH, AGENT_HEALTH_WAIT, HEALTH_PATH, TOKEN_ENV
from agentsession.controller.config import (
    EPHEMERAL_STORAGE,
    AgentProfile,
    EgressProxy,
    OperatorConfig,
    Resources,
)
from agentsession.controller.durations import parse_duration

SPEC_HASH_ANNOTATION = "agentsession.dev/pod-spec-hash"
AGENT_IN = f"{FIFO_DIR}/agent.in"
AGENT_OUT = f"{FIFO_DIR}/agent.out"
WORKSPACE_VOLUME = "workspace"
FIFO_VOLUME = "agentctl-fifo"
TMP_VOLUME = "tmp"
AGENTCTL_TMP_VOLUME = "agentctl-tmp"
FIFO_SIZE = "1Mi"
TMP_SIZE = "1Gi"
AGENTCTL_TMP_SIZE = "256Mi"
# The workspace volume's two directories: the workspace, and agentctl's, which the agent's container never mounts.
LAYOUT_DIR = ".agentsession"
WORKSPACE_SUBPATH = f"{LAYOUT_DIR}/workspace"
AGENTCTL_SUBPATH = f"{LAYOUT_DIR}/agentctl"
AGENTCTL_STATE_DIR = f"{AGENTCTL_DIR}/state"
AGENTCTL_HOME = f"{AGENTCTL_DIR}/home"
# Files the agent and the terminal write are group-writable, so each edits the other's.
SHARED_UMASK = "002"
LAYOUT_CONTAINER = "layout"
VOLUME_ROOT = "/volume"
CA_VOLUME = "ca-bundle"
CA_DIR = "/etc/agentsession/ca"
CA_FILE = f"{CA_DIR}/ca.crt"
# OpenSSL-based runtimes read one bundle: the image's roots plus the extra CAs, joined at start on a writable volume.
CA_BUNDLE_FILE = "/tmp/.agentsession/ca-bundle.crt"
SYSTEM_CA_FILE = "/etc/ssl/certs/ca-certificates.crt"
# The pod's grace period is the drain timeout plus this: the cancel grace of a drain that ran out, then the agent's
# and agentctl's exits.
GRACE_MARGIN_SECONDS = 10
STOP_REQUEST = f"{FIFO_DIR}/{STOP_REQUEST_FILE}"
STOPPED = f"{FIFO_DIR}/{STOPPED_FILE}"
# The agent may start before agentctl has made the FIFOs (e.g. after an agent-only restart race);
# wait for them, but not forever, so a broken sidecar shows up as a crash-looping agent.
FIFO_WAIT_TENTHS = 600
# Both containers' last output becomes their termination message when they fail, so an agent that exits at
# start-up explains itself in the session's status instead of only in `kubectl logs --previous`.
TERMINATION_MESSAGE_POLICY = "FallbackToLogsOnError"


def agent_wrapper(state_dirs: list[str], extra_ca: bool, drain_seconds: float) -> str:
    """The agent container's shell: prepare what the agent expects, run it on the FIFO pair, stop it gracefully.

    `state_dirs` are variable names (HOME first) whose directories must exist before the agent runs.

    The agent runs as the shell's child, not as PID 1, which ignores SIGTERM unless it handles it (most agents do
    not, so every stop waited out the grace period). On the kubelet's SIGTERM the shell asks agentctl to drain
    (STOP_REQUEST), waits until agentctl has (STOPPED) or the agent has exited, at most the drain timeout and a
    margin, then sends the agent SIGTERM.
    """
    dirs = " ".join(f'"${name}"' for name in state_dirs)
    steps = [
        f"umask {SHARED_UMASK}",
        "stopping=",
        "trap 'stopping=1' TERM INT",
        f"for d in {dirs}; do "
        '[ -z "$d" ] || mkdir -p "$d" || '
        '{ echo "agent: cannot create directory $d; mount a writable volume there or change the variable" >&2; '
        "exit 1; }; done",
    ]
    if extra_ca:
        steps.append(
            f'mkdir -p "$(dirname "{CA_BUNDLE_FILE}")" && '
            f'{{ cat "{SYSTEM_CA_FILE}" 2>/dev/null; cat "{CA_FILE}"; }} >"{CA_BUNDLE_FILE}" || '
            f'{{ echo "agent: cannot read the CA bundle {CA_FILE}; check spec.agent.caBundle" >&2; exit 1; }}'
        )
    wait_tenths = math.ceil(drain_seconds + GRACE_MARGIN_SECONDS / 2) * 10
    steps += [
        "i=0",
        f'while [ -z "$stopping" ] && {{ [ ! -p "{AGENT_IN}" ] || [ ! -p "{AGENT_OUT}" ]; }}; do '
        f'i=$((i+1)); if [ "$i" -gt {FIFO_WAIT_TENTHS} ]; then '
        'echo "agent: agentctl FIFOs did not appear in 60s; is the agentctl sidecar running?" >&2; exit 1; fi; '
        "sleep 0.1; done",
        '[ -z "$stopping" ] || exit 143',
        f'"$@" <"{AGENT_IN}" >"{AGENT_OUT}" & agent=$!',
        'wait "$agent"; code=$?',
        'if [ -n "$stopping" ]; then '
        f': >"{STOP_REQUEST}"; i=0; '
        f'while kill -0 "$agent" 2>/dev/null && [ ! -e "{STOPPED}" ] && [ "$i" -lt {wait_tenths} ]; do '
        "i=$((i+1)); sleep 0.1; done; "
        'kill -TERM "$agent" 2>/dev/null; wait "$agent"; code=$?; fi',
        'exit "$code"',
    ]
    return "; ".join(steps)


def drain_timeout(spec: AgentSessionSpec) -> float:
    """lifecycle.drainTimeout in seconds: how long a running turn may finish when the pod stops."""
    lifecycle = spec.lifecycle
    if lifecycle and lifecycle.drainTimeout:
        return parse_duration(lifecycle.drainTimeout)
    return float(DEFAULT_DRAIN_SECONDS)


class SpecError(ValueError):
    """The spec cannot be turned into a pod; the message tells the user what to change."""


class AgentctlImageRefused(SpecError):
    """spec.agentctl.image names an image the operator does not allow."""


class EgressProxyUnavailable(SpecError):
    """The operator sends session pods through an egress proxy whose address it does not know (its Service does
    not exist): a pod without the proxy would need the real key, so none is built."""

    def __init__(self, proxy: EgressProxy) -> None:
        super().__init__(
            f"the egress proxy's Service {proxy.service_namespace}/{proxy.service_name} does not exist or has no "
            "ClusterIP, so no pod is created (without the proxy the agent would need the real key); the "
            "cluster's administrator must install the egress proxy (chart value egressProxy.enabled) or unset "
            "the operator's egress_proxy setting; the pod is created once the Service exists"
        )


@dataclass(frozen=True)
class EgressRoute:
    """How one pod's traffic leaves: through the egress proxy at `address` (its Service's ClusterIP), and the
    phantom credential this pod's agent holds in place of the key. The phantom is made per pod by the caller
    (`egress.new_phantom`), so building stays pure."""

    address: str
    port: int
    git_hosts: tuple[str, ...]
    phantom: str

    @property
    def url(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"http://{host}:{self.port}"

    def model_url(self, provider: str) -> str:
        return f"{self.url}/v1/model/{provider}"


def egress_route(config: OperatorConfig, address: str | None, phantom: str) -> EgressRoute | None:
    """The route of a pod built now, when the operator sends pods through the proxy and knows its address."""
    proxy = config.egress_proxy
    if proxy is None or address is None:
        return None
    return EgressRoute(address, proxy.port, tuple(proxy.git_hosts), phantom)


def _proxy_env(route: EgressRoute) -> Iterator[tuple[str, str]]:
    """The variables that send a process's HTTP(S) and git traffic through the proxy: the usual proxy variables
    (both spellings: curl reads only the lower-case http_proxy, Go and Python either), and git's insteadOf rules
    for the git hosts, whose https:// URLs go to the proxy's git route, where it adds the session's token."""
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
        yield name, route.url
    direct = f"{route.address},localhost,127.0.0.1"
    yield "NO_PROXY", direct
    yield "no_proxy", direct
    if route.git_hosts:
        yield "GIT_CONFIG_COUNT", str(len(route.git_hosts))
    for index, host in enumerate(route.git_hosts):
        yield f"GIT_CONFIG_KEY_{index}", f"url.{route.url}/v1/git/{host}/.insteadOf"
        yield f"GIT_CONFIG_VALUE_{index}", f"https://{host}/"


def labels(session: SessionRef, component: str) -> dict[str, str]:
    return {
        LABEL_NAME: "agentsession",
        LABEL_INSTANCE: session.name,
        LABEL_COMPONENT: component,
        LABEL_PART_OF: "agentsession",
        LABEL_MANAGED_BY: MANAGER,
        LABEL_SESSION: session.name,
    }


def _metadata(session: SessionRef, name: str, component: str) -> Manifest:
    return {
        "name": name,
        "namespace": session.namespace,
        "labels": labels(session, component),
        "ownerReferences": [session.owner_reference()],
    }


def build_token_secret(session: SessionRef, token: str) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": _metadata(session, token_secret_name(session.children), "agentctl-token"),
        "type": TOKEN_SECRET_TYPE,
        "data": {TOKEN_KEY: base64.b64encode(token.encode()).decode()},
    }


def build_workspace_claim(session: SessionRef, spec: AgentSessionSpec) -> Manifest | None:
    workspace = spec.workspace
    if workspace is None or workspace.size is None:
        return None
    claim_spec: Manifest = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": str(workspace.size)}},
    }
    if workspace.storageClassName:
        claim_spec["storageClassName"] = workspace.storageClassName
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _metadata(session, workspace_claim_name(session.children), "workspace"),
        "spec": claim_spec,
    }


# Resources every container is bounded in, by the session's own values or else the operator's: the node's disk is
# shared, and a pod with no ephemeral-storage limit may fill it and get other tenants' pods evicted.
ALWAYS_BOUNDED = (EPHEMERAL_STORAGE,)


def _resources(override: ResourceRequirements | None, default: Resources) -> Manifest:
    """The session's requests and limits, the operator's defaults for the half it leaves out, and for each of
    ALWAYS_BOUNDED the session does not name.

    A default never makes a valid spec invalid: a default limit below the session's request rises to it, and a
    default request above the session's limit comes down to it."""
    if override is None:
        return {"requests": dict(default.requests), "limits": dict(default.limits)}
    requests = _quantities(override.requests) if override.requests is not None else None
    limits = _quantities(override.limits) if override.limits is not None else None
    if requests is None and limits is not None:
        requests = {n: _at_most(q, limits.get(n)) for n, q in default.requests.items()}
    if limits is None and requests is not None:
        limits = {n: _at_least(q, requests.get(n)) for n, q in default.limits.items()}
    requests, limits = requests or {}, limits or {}
    for name in ALWAYS_BOUNDED:
        if name not in limits and name in default.limits:
            limits[name] = _at_least(default.limits[name], requests.get(name))
        if name not in requests and name in default.requests:
            requests[name] = _at_most(default.requests[name], limits.get(name))
    return {key: value for key, value in (("requests", requests), ("limits", limits)) if value}


def _quantities(values: dict[str, int | str]) -> dict[str, str]:
    return {name: str(quantity) for name, quantity in values.items()}


def _compare(a: str, b: str) -> int | None:
    """-1, 0 or 1 as quantity a is below, equal to or above b; None when either is not a quantity (the API
    server then says so)."""
    try:
        qa: Decimal = parse_quantity(a)  # type: ignore[no-untyped-call]
        qb: Decimal = parse_quantity(b)  # type: ignore[no-untyped-call]
    except ValueError:
        return None
    return int(qa > qb) - int(qa < qb)


def _at_least(default: str, floor: str | None) -> str:
    return floor if floor is not None and _compare(default, floor) == -1 else default


def _at_most(default: str, ceiling: str | None) -> str:
    return ceiling if ceiling is not None and _compare(default, ceiling) == 1 else default


def _container_security_context(config: OperatorConfig, user: int) -> Manifest:
    """Restricted, as `user`; the group is the one the agent and agentctl share (the workspace's)."""
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": user,
        "runAsGroup": config.run_as_user,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _http_probe(
    port: str | int, period: int, failures: int, timeout: int = 2, path: str = HEALTH_PATH
) -> Manifest:
    return {
        "httpGet": {"path": path, "port": port},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": timeout,
    }


def _profile(spec: AgentSessionSpec, config: OperatorConfig) -> AgentProfile | None:
    return config.agent_profiles.get(spec.agent.type)


def _agent_command(
    spec: AgentSessionSpec, profile: AgentProfile | None, config: OperatorConfig, route: EgressRoute | None
) -> tuple[str, list[str]]:
    agent = spec.agent
    image = agent.image or (profile.image if profile else None)
    if agent.type == "demo" and image is None:
        image = config.image
    if image is None:
        raise SpecError(
            f"agent.type {agent.type!r} has no default image in the operator's configuration: "
            "set spec.agent.image, or configure an image for this agent type"
        )
    command = list(agent.command) if agent.command else list(profile.command if profile else [])
    if not command:
        raise SpecError(f"agent.type {agent.type!r} has no default command: set spec.agent.command")
    args = (
        list(agent.args)
        if agent.args is not None
        else list(profile.args if profile and not agent.command else [])
    )
    return image, command + args + _model_args(spec, profile, route)


def _base_url(spec: AgentSessionSpec, route: EgressRoute | None) -> str | None:
    """The model base URL the agent is given: the proxy's model route for its provider when there is a proxy
    (which forwards to spec.agent.model.baseURL, so the agent never needs to know it), else the spec's."""
    provider = PROVIDERS.get(spec.agent.type)
    if route is not None and provider is not None:
        return route.model_url(provider.provider)
    return spec.agent.model.baseURL if spec.agent.model else None


def _model_args(spec: AgentSessionSpec, profile: AgentProfile | None, route: EgressRoute | None) -> list[str]:
    model = spec.agent.model
    base_url = _base_url(spec, route)
    if base_url is None or profile is None or profile.model is None:
        return []
    name = model.name if model else None
    values = {"baseURL": base_url, "name": name or ""}
    args = [arg.format_map(values) for arg in profile.model.args]
    if name:
        args += [arg.format_map(values) for arg in profile.model.name_args]
    return args


def _agentctl_image(spec: AgentSessionSpec, config: OperatorConfig) -> str:
    """The operator's image, or one the operator allows: agentctl answers the operator and the gateway, so an
    image of the tenant's choosing would decide what they read."""
    asked = spec.agentctl.image if spec.agentctl else None
    if asked is None or asked == config.image or asked in config.agentctl_images:
        return asked or config.image
    raise AgentctlImageRefused(
        f"spec.agentctl.image {asked!r} is not allowed: agentctl runs the operator's image; remove "
        "spec.agentctl.image, or ask the cluster's administrator to allow that image (operator setting "
        "agentctl_images, chart value operator.agentctlImages)"
    )


def _ca_bundle(spec: AgentSessionSpec, config: OperatorConfig) -> CABundleSource | None:
    return spec.agent.caBundle or config.ca_bundle


def _agent_env(
    spec: AgentSessionSpec,
    profile: AgentProfile | None,
    extra_ca: bool,
    mount_path: str,
    route: EgressRoute | None,
) -> list[Manifest]:
    """HOME, then the profile's variables (which may refer to $(HOME)), the CA and model wiring, the egress
    proxy's variables and the phantom key, and last the session's own env, each replacing a variable of the same
    name where it stands so references still expand."""
    env: dict[str, Manifest] = {"HOME": {"name": "HOME", "value": f"{mount_path.rstrip('/')}/.home"}}
    for name, value in (profile.env if profile else {}).items():
        env[name] = {"name": name, "value": value}
    if extra_ca:
        for name, value in (
            ("NODE_EXTRA_CA_CERTS", CA_FILE),
            ("SSL_CERT_FILE", CA_BUNDLE_FILE),
            ("REQUESTS_CA_BUNDLE", CA_BUNDLE_FILE),
            # Debian's git speaks TLS through GnuTLS, which reads neither of the above.
            ("GIT_SSL_CAINFO", CA_BUNDLE_FILE),
        ):
            env[name] = {"name": name, "value": value}
    model = spec.agent.model
    if profile is not None and profile.model is not None:
        wiring: list[tuple[str | None, str | None]] = [
            (profile.model.base_url_env, _base_url(spec, route)),
            (profile.model.name_env, model.name if model else None),
        ]
        for wired, setting in wiring:
            if wired and setting:
                env[wired] = {"name": wired, "value": setting}
    if route is not None:
        for name, value in _proxy_env(route):
            env[name] = {"name": name, "value": value}
        provider = PROVIDERS.get(spec.agent.type)
        if provider is not None:
            env[provider.key_env] = {"name": provider.key_env, "value": route.phantom}
    for var in spec.agent.env or []:
        env[var.name] = var.model_dump(exclude_none=True)
    return list(env.values())


def _env_from(spec: AgentSessionSpec, route: EgressRoute | None) -> list[Manifest]:
    """The session's own sources, and its credentials Secret unless the proxy holds the key for the agent: then
    no container of the pod reads that Secret (a Secret the session names in agent.envFrom or agent.env is its
    owner's choice, and reaches the agent as asked)."""
    sources = [source.model_dump(exclude_none=True) for source in spec.agent.envFrom or []]
    if spec.agent.credentialsSecretRef is not None and route is None:
        sources.append({"secretRef": {"name": spec.agent.credentialsSecretRef.name}})
    return sources


def _workspace_mount(mount_path: str) -> Manifest:
    return {"name": WORKSPACE_VOLUME, "mountPath": mount_path, "subPath": WORKSPACE_SUBPATH}


def _clone_container(
    spec: AgentSessionSpec, config: OperatorConfig, mount_path: str, route: EgressRoute | None
) -> Manifest | None:
    workspace = spec.workspace
    if workspace is None or workspace.repository is None:
        return None
    repo = workspace.repository
    branch = f"--branch {shlex.quote(repo.ref)} " if repo.ref else ""
    # Cloning only into an empty workspace keeps a resumed session's work untouched. The clone is the agent's,
    # group-writable for the terminal.
    script = (
        f"umask {SHARED_UMASK} && cd {shlex.quote(mount_path)} && if [ -e .git ]; then "
        f"echo 'workspace already cloned'; else git clone --depth 1 {branch}{shlex.quote(repo.url)} .; fi"
    )
    return {
        "name": "clone",
        "image": config.git_image,
        "imagePullPolicy": config.image_pull_policy,
        "command": ["sh", "-c", script],
        "terminationMessagePolicy": TERMINATION_MESSAGE_POLICY,
        "env": [
            {"name": "HOME", "value": "/tmp"},
            *({"name": name, "value": value} for name, value in (_proxy_env(route) if route else ())),
        ],
        "resources": _resources(None, config.agentctl_resources),
        "securityContext": _container_security_context(config, config.run_as_user),
        "volumeMounts": [_workspace_mount(mount_path), {"name": TMP_VOLUME, "mountPath": "/tmp"}],
    }


# A persistent volume of the layout before (the workspace's files at its root, agentctl's state in `.agentctl`)
# is moved into the layout once: everything at the root into the workspace directory, `.agentctl` into
# agentctl's, all made group-writable (one uid, the agent's, wrote it all with umask 022, so the step runs as that
# uid: it owns what it moves and changes). Each move is a rename on one filesystem, and a step cut short finishes
# at the next start: the workspace directory appears last, whole. On a new volume it makes both directories, the
# agent's uid's, before the kubelet would make them root's for a mount. Its argument is the volume's root.
LAYOUT_SCRIPT = f"""set -eu
umask {SHARED_UMASK}
cd "$1"
if [ ! -d {WORKSPACE_SUBPATH} ]; then
  mkdir -p {LAYOUT_DIR}/moving
  for entry in * .[!.]* ..?*; do
    case "$entry" in {LAYOUT_DIR}|lost+found) continue ;; esac
    if [ -e "$entry" ] || [ -L "$entry" ]; then
      mv "$entry" {LAYOUT_DIR}/moving/ || echo "layout: cannot move $entry; it stays at the volume's root" >&2
    fi
  done
  if [ -d {LAYOUT_DIR}/moving/.agentctl ] && [ ! -e {AGENTCTL_SUBPATH}/state ]; then
    mkdir -p {AGENTCTL_SUBPATH}
    mv {LAYOUT_DIR}/moving/.agentctl {AGENTCTL_SUBPATH}/state
  fi
  find {LAYOUT_DIR} -user "$(id -u)" \\( -type d -o -type f \\) -exec chmod g+rwX {{}} + ||
    echo "layout: some files keep their modes; the terminal may not edit them" >&2
  mv {LAYOUT_DIR}/moving {WORKSPACE_SUBPATH}
  echo "layout: the volume's files are in {WORKSPACE_SUBPATH}"
fi
mkdir -p {AGENTCTL_SUBPATH}"""


def _layout_container(config: OperatorConfig) -> Manifest:
    return {
        "name": LAYOUT_CONTAINER,
        "image": config.image,
        "imagePullPolicy": config.image_pull_policy,
        "command": ["sh", "-c", LAYOUT_SCRIPT, LAYOUT_CONTAINER, VOLUME_ROOT],
        "terminationMessagePolicy": TERMINATION_MESSAGE_POLICY,
        "resources": _resources(None, config.agentctl_resources),
        "securityContext": _container_security_context(config, config.run_as_user),
        "volumeMounts": [{"name": WORKSPACE_VOLUME, "mountPath": VOLUME_ROOT}],
    }


def _persistent(spec: AgentSessionSpec) -> bool:
    return spec.workspace is not None and spec.workspace.size is not None


def _workspace_volume(session: SessionRef, spec: AgentSessionSpec, config: OperatorConfig) -> Manifest:
    if _persistent(spec):
        return {
            "name": WORKSPACE_VOLUME,
            "persistentVolumeClaim": {"claimName": workspace_claim_name(session.children)},
        }
    return {"name": WORKSPACE_VOLUME, "emptyDir": {"sizeLimit": config.workspace_size_limit}}


def build_pod(
    session: SessionRef, spec: AgentSessionSpec, config: OperatorConfig, route: EgressRoute | None = None
) -> Manifest:
    """The session's Pod. Raises SpecError when the spec lacks what the pod needs, and EgressProxyUnavailable
    when the operator sends pods through an egress proxy and `route` (its address, the pod's phantom) is None."""
    if config.egress_proxy is not None and route is None:
        raise EgressProxyUnavailable(config.egress_proxy)
    mount_path = spec.workspace.mountPath if spec.workspace else "/workspace"
    profile = _profile(spec, config)
    ca_bundle = _ca_bundle(spec, config)
    agent_image, agent_argv = _agent_command(spec, profile, config, route)
    agentctl_image = _agentctl_image(spec, config)
    lifecycle = spec.lifecycle
    drain_seconds = drain_timeout(spec)
    fifo_mount = {"name": FIFO_VOLUME, "mountPath": FIFO_DIR}
    agentctl = {
        "name": AGENTCTL_CONTAINER,
        "image": agentctl_image,
        "imagePullPolicy": config.image_pull_policy,
        "restartPolicy": "Always",
        "command": ["agentctl"],
        "terminationMessagePolicy": TERMINATION_MESSAGE_POLICY,
        "args": [
            "--port",
            str(config.agentctl_port),
            "--workdir",
            mount_path,
            "--state-dir",
            AGENTCTL_STATE_DIR,
            "--shell-umask",
            SHARED_UMASK,
            "--agent-fifo-dir",
            FIFO_DIR,
            "--drain-timeout",
            f"{drain_seconds:g}",
            "--log-format",
            "json",
        ],
        "env": [
            {
                "name": TOKEN_ENV,
                "valueFrom": {
                    "secretKeyRef": {"name": token_secret_name(session.children), "key": TOKEN_KEY}
                },
            },
            # The terminal's: a login shell runs the profiles it finds there, so the agent must not reach it.
            {"name": "HOME", "value": AGENTCTL_HOME},
            # The terminal's commands leave the pod the way the agent's do (agentctl itself calls out nowhere).
            *({"name": name, "value": value} for name, value in (_proxy_env(route) if route else ())),
        ],
        "ports": [{"name": "agentctl", "containerPort": config.agentctl_port, "protocol": "TCP"}],
        # No startup probe: the agent container starts beside agentctl (its wrapper waits for the FIFOs), and
        # readiness, checked every second from the start, flips as soon as agentctl listens.
        "readinessProbe": _http_probe("agentctl", period=1, failures=2),
        "livenessProbe": _http_probe("agentctl", period=10, failures=3, timeout=5),
        "resources": _resources(
            spec.agentctl.resources if spec.agentctl else None, config.agentctl_resources
        ),
        "securityContext": _container_security_context(config, config.agentctl_run_as_user),
        "volumeMounts": [
            _workspace_mount(mount_path),
            {"name": WORKSPACE_VOLUME, "mountPath": AGENTCTL_DIR, "subPath": AGENTCTL_SUBPATH},
            dict(fifo_mount),
            {"name": AGENTCTL_TMP_VOLUME, "mountPath": "/tmp"},
        ],
    }
    agent_mounts: list[Manifest] = [
        _workspace_mount(mount_path),
        dict(fifo_mount),
        {"name": TMP_VOLUME, "mountPath": "/tmp"},
    ]
    if ca_bundle is not None:
        agent_mounts.append({"name": CA_VOLUME, "mountPath": CA_DIR, "readOnly": True})
    wrapper = agent_wrapper(
        ["HOME", *(profile.state_dirs if profile else [])],
        extra_ca=ca_bundle is not None,
        drain_seconds=drain_seconds,
    )
    agent = {
        "name": AGENT_CONTAINER,
        "image": agent_image,
        "imagePullPolicy": spec.agent.imagePullPolicy or config.image_pull_policy,
        "command": ["sh", "-c", wrapper, "agent", *agent_argv],
        "terminationMessagePolicy": TERMINATION_MESSAGE_POLICY,
        "workingDir": spec.cwd or mount_path,
        "env": _agent_env(spec, profile, ca_bundle is not None, mount_path, route),
        "resources": _resources(spec.agent.resources, config.agent_resources),
        "securityContext": _container_security_context(config, config.run_as_user),
        "volumeMounts": agent_mounts,
        # The agent is ready once it has answered ACP initialize, which agentctl sends as soon as both run; the
        # pod is then Ready when its agent can take a session. agentctl holds the probe up to AGENT_HEALTH_WAIT
        # for the answer, so the probe sees it at once instead of a period later.
        "readinessProbe": _http_probe(
            config.agentctl_port,
            period=1,
            failures=2,
            timeout=AGENT_HEALTH_WAIT + 1,
            path=f"{AGENT_HEALTH_PATH}?wait={AGENT_HEALTH_WAIT}",
        ),
    }
    env_from = _env_from(spec, route)
    if env_from:
        agent["envFrom"] = env_from

    template = spec.podTemplate
    # Only a persistent volume can hold the layout before, and only there must the layout be made before the
    # kubelet makes the workspace's directory for a mount; an emptyDir starts empty every time.
    layout = _layout_container(config) if _persistent(spec) else None
    init_containers = [
        c for c in (layout, _clone_container(spec, config, mount_path, route), agentctl) if c is not None
    ]
    pod_spec: Manifest = {
        "restartPolicy": "Never" if lifecycle and lifecycle.restartPolicy == "Never" else "Always",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": math.ceil(drain_seconds) + GRACE_MARGIN_SECONDS,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": config.run_as_user,
            "runAsGroup": config.run_as_user,
            # The workspace belongs to the group the agent and agentctl share (setgid, group-writable) where the
            # volume type lets the kubelet change ownership; checking the root only keeps large workspaces fast
            # to remount.
            "fsGroup": config.run_as_user,
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "initContainers": init_containers,
        "containers": [agent],
        "volumes": [
            _workspace_volume(session, spec, config),
            {"name": FIFO_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": FIFO_SIZE}},
            {"name": TMP_VOLUME, "emptyDir": {"sizeLimit": TMP_SIZE}},
            {"name": AGENTCTL_TMP_VOLUME, "emptyDir": {"sizeLimit": AGENTCTL_TMP_SIZE}},
        ],
    }
    if ca_bundle is not None:
        pod_spec["volumes"].append(
            {
                "name": CA_VOLUME,
                "configMap": {
                    "name": ca_bundle.configMapName,
                    "items": [{"key": ca_bundle.key, "path": "ca.crt"}],
                },
            }
        )
    if lifecycle and lifecycle.maxDuration:
        pod_spec["activeDeadlineSeconds"] = max(1, math.ceil(parse_duration(lifecycle.maxDuration)))
    if template:
        overrides = template.model_dump(exclude_none=True)
        for field in ("nodeSelector", "tolerations", "affinity", "priorityClassName"):
            if field in overrides:
                pod_spec[field] = overrides[field]

    metadata = _metadata(session, pod_name(session.children), "agent")
    if template and template.labels:
        # The operator's own labels win: the pod → session mapping depends on them.
        metadata["labels"] = {**template.labels, **metadata["labels"]}
    metadata["annotations"] = {**(template.annotations or {} if template else {})}
    if route is not None:
        # How the proxy finds the pod from the phantom its agent presents.
        metadata["annotations"][PHANTOM_DIGEST_ANNOTATION] = phantom_digest(route.phantom)
    metadata["annotations"][SPEC_HASH_ANNOTATION] = pod_spec_hash(pod_spec, metadata)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


# Labels that say whose a pod is, not what it is: a pool's pod and the session that claims it differ only there.
IDENTITY_LABELS = frozenset({LABEL_SESSION, LABEL_INSTANCE, LABEL_POOL, LABEL_CLAIMED_FROM})


def shape_hash(pod: Manifest) -> str:
    """A digest of the pod without whose it is: equal for a pool's pod and the pod a session would get in its
    place, which is what a claim checks."""
    metadata = pod["metadata"]
    labels = {k: v for k, v in metadata.get("labels", {}).items() if k not in IDENTITY_LABELS}
    annotations = {
        k: v
        for k, v in metadata.get("annotations", {}).items()
        if k not in (SPEC_HASH_ANNOTATION, SHAPE_HASH_ANNOTATION)
    }
    return pod_spec_hash(pod["spec"], {"labels": labels, "annotations": annotations})


def pod_spec_hash(pod_spec: Manifest, metadata: Manifest) -> str:
    """A digest of what cannot change on a running pod, so a spec change can be told apart from no change.

    The phantom credential (and its digest) is left out: each pod built gets a new one, and a pod is not outdated
    for holding another phantom than the next pod would."""
    annotations = metadata.get("annotations", {})
    relevant = {
        "spec": _without_phantom(pod_spec, annotations.get(PHANTOM_DIGEST_ANNOTATION)),
        "labels": metadata.get("labels", {}),
        "annotations": {
            k: v for k, v in annotations.items() if k not in (SPEC_HASH_ANNOTATION, PHANTOM_DIGEST_ANNOTATION)
        },
    }
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]


PHANTOM_PLACEHOLDER = "<phantom>"


def _without_phantom(pod_spec: Manifest, digest: str | None) -> Manifest:
    """The pod spec with the value of every variable that holds the phantom (the one whose digest the pod's
    annotation carries) replaced by a placeholder; the spec itself when the pod has no phantom."""
    if digest is None:
        return pod_spec

    def masked(container: Manifest) -> Manifest:
        env = [
            {**var, "value": PHANTOM_PLACEHOLDER}
            if "value" in var and phantom_digest(str(var["value"])) == digest
            else var
            for var in container.get("env") or []
        ]
        return {**container, "env": env} if "env" in container else container

    return {
        **pod_spec,
        "containers": [masked(c) for c in pod_spec.get("containers") or []],
        "initContainers": [masked(c) for c in pod_spec.get("initContainers") or []],
    }
