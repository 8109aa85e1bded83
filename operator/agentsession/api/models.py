"""Pydantic models of the AgentSession spec and status: the single source of truth for the CRD schema.

Field names are the wire names (camelCase), as in every Kubernetes API. Rules that need more than one field,
or the old object, are CEL rules (`x-kubernetes-validations`) attached here and enforced by the API server.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, create_model

from agentsession.api.acp import AgentIdentity, CurrentModeId, Modes, SessionId
from agentsession.api.egress import Budget, NetworkSpec, Usage

DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
# Go duration syntax, which CEL's duration() parses, so rules can compare durations.
DURATION = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$"
ABSOLUTE_PATH = r"^/[^\x00]*$"

ObjectName = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=DNS_SUBDOMAIN)]
Duration = Annotated[str, StringConstraints(max_length=32, pattern=DURATION)]
AbsolutePath = Annotated[str, StringConstraints(min_length=1, max_length=4096, pattern=ABSOLUTE_PATH)]
Image = Annotated[str, StringConstraints(min_length=1, max_length=512, pattern=r"^[^\s]+$")]
# A non-negative Kubernetes quantity: the API's own syntax for strings ("500m", "2Gi", "0.5"), or an integer. A CRD
# field can be integer-or-string, never any number, so `cpu: 0.5` is refused where a Pod would take it: write "0.5".
QUANTITY = r"^(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
Quantity = Annotated[
    int | Annotated[str, StringConstraints(min_length=1, max_length=64, pattern=QUANTITY)],
    Field(
        json_schema_extra={
            "x-agentsession-quantity": True,
            "x-kubernetes-validations": [
                {
                    "rule": "type(self) == string || self >= 0",
                    "message": 'must be a non-negative quantity, e.g. 500m, 2Gi or "0.5"',
                    "reason": "FieldValueInvalid",
                }
            ],
        }
    ),
]
# A label (or annotation) key: an optional DNS-subdomain prefix and a name of at most 63 characters.
LABEL_KEY = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"
# Paths the operator mounts volumes of its own at: a workspace there would hide them (or they the workspace).
RESERVED_MOUNT_PATHS = (
    "/", "/tmp", "/run/agentctl", "/var/lib/agentctl", "/etc/agentsession", "/proc", "/dev", "/sys"
)  # fmt: skip
# Arbitrary Kubernetes objects (affinity) are passed through to the Pod unchanged.
KubeObject = dict[str, Any]

AgentType = Literal["demo", "claude-code", "codex", "gemini", "custom"]
ConditionType = Literal[
    "PodScheduled",
    "AgentctlReady",
    "AgentInitialized",
    "Suspended",
    "Ready",
    "RestartPending",
    "BudgetExhausted",
]
ConditionStatus = Literal["True", "False", "Unknown"]
# Unknown, as a Pod's: the node stopped reporting, so nothing confirms the agent runs or has stopped.
Phase = Literal["Suspended", "Pending", "Starting", "Ready", "Failed", "Terminating", "Unknown"]


Rule = tuple[str, str] | tuple[str, str, str]


def _rules(*rules: Rule) -> dict[str, Any]:
    """CEL rules of an object: (rule, message) or (rule, message, fieldPath); every error names its field."""
    validations = []
    for rule, message, *where in rules:
        validation = {"rule": rule, "message": message, "reason": "FieldValueInvalid"}
        if where:
            validation["fieldPath"] = where[0]
        validations.append(validation)
    return {"x-kubernetes-validations": validations}


def _keys_and_values(field: str, what: str, *, values: bool) -> list[Rule]:
    """Label-syntax rules for the keys (and values) of a map field, as the API server applies them to Pods."""
    rules: list[Rule] = [
        (
            f"!has(self.{field}) || self.{field}.all(k, size(k) <= 317 && k.matches(r'{LABEL_KEY}'))",
            f"{what} keys must be label keys: an optional DNS prefix and '/', then at most 63 letters, digits, "
            "'-', '_' or '.', starting and ending with a letter or digit",
            f".{field}",
        )
    ]
    if values:
        rules.append(
            (
                f"!has(self.{field}) || self.{field}.all(k, self.{field}[k].matches(r'{LABEL_VALUE}'))",
                f"{what} values must be label values: at most 63 letters, digits, '-', '_' or '.', starting and "
                "ending with a letter or digit (or empty)",
                f".{field}",
            )
        )
    return rules


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class KeyReference(_Model):
    """One key of a ConfigMap or Secret in the session's namespace."""

    name: ObjectName = Field(description="The ConfigMap or Secret.")
    key: str = Field(min_length=1, max_length=253, pattern=r"^[-._a-zA-Z0-9]+$", description="The key.")
    optional: bool | None = Field(default=None, description="Whether the key may be missing.")


class EnvVarSource(_Model):
    """Where a variable's value comes from: exactly one source, as in a Pod."""

    configMapKeyRef: KeyReference | None = Field(default=None, description="A key of a ConfigMap.")
    secretKeyRef: KeyReference | None = Field(default=None, description="A key of a Secret.")
    fieldRef: KubeObject | None = Field(default=None, description="A core/v1 ObjectFieldSelector of the pod.")
    resourceFieldRef: KubeObject | None = Field(
        default=None, description="A core/v1 ResourceFieldSelector of a container."
    )

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "[has(self.configMapKeyRef), has(self.secretKeyRef), has(self.fieldRef), "
                "has(self.resourceFieldRef)].filter(x, x).size() == 1",
                "valueFrom needs exactly one of configMapKeyRef, secretKeyRef, fieldRef or resourceFieldRef",
            )
        )
    )


class NameReference(_Model):
    name: ObjectName = Field(description="The ConfigMap or Secret in the session's namespace.")
    optional: bool | None = Field(default=None, description="Whether it may be missing.")


class EnvFromSource(_Model):
    """All keys of one ConfigMap or Secret as variables, as in a Pod."""

    prefix: str | None = Field(
        default=None,
        max_length=256,
        pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$",
        description="Put before each key.",
    )
    configMapRef: NameReference | None = Field(default=None, description="The ConfigMap.")
    secretRef: NameReference | None = Field(default=None, description="The Secret.")

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "has(self.configMapRef) != has(self.secretRef)",
                "each envFrom entry needs exactly one of configMapRef or secretRef",
            )
        )
    )


class EnvVar(_Model):
    """An environment variable of the agent container, as in a Pod."""

    name: str = Field(
        min_length=1, max_length=256, pattern=r"^[-._a-zA-Z][-._a-zA-Z0-9]*$", description="Variable name."
    )
    value: str | None = Field(
        default=None, max_length=32768, description="Its value; may refer to earlier variables as $(NAME)."
    )
    valueFrom: EnvVarSource | None = Field(default=None, description="Where the value comes from instead.")

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "!(has(self.value) && has(self.valueFrom))",
                "an env entry sets value or valueFrom, not both",
                ".valueFrom",
            )
        )
    )


class SecretReference(_Model):
    name: ObjectName = Field(
        description="Secret in the session's namespace; each key becomes an env variable."
    )


class CABundleSource(_Model):
    configMapName: ObjectName = Field(
        description="ConfigMap in the session's namespace holding PEM CA certificates the agent trusts "
        "in addition to the image's own (e.g. a corporate proxy's)."
    )
    key: str = Field(
        default="ca.crt",
        min_length=1,
        max_length=253,
        pattern=r"^[-._a-zA-Z0-9]+$",
        description="Key of the PEM data.",
    )


class ModelEndpoint(_Model):
    baseURL: str = Field(
        max_length=2048,
        pattern=r"^https?://[^\s\"'\\]+$",
        description="Base URL of the model API the agent calls (a proxy, a gateway, a compatible provider); "
        "each known agent type receives it the way its documentation says.",
    )
    name: str | None = Field(
        default=None, min_length=1, max_length=256, pattern=r"^[^\s\"'\\]+$", description="Model name to use."
    )


class ResourceRequirements(_Model):
    """Compute resources of one container, as in a Pod. Left out, the operator's defaults apply; a default never
    makes a request exceed its limit."""

    requests: dict[str, Quantity] | None = Field(
        default=None,
        max_length=16,
        description="Minimum resources, by name (cpu, memory, ...), as quantities.",
    )
    limits: dict[str, Quantity] | None = Field(
        default=None,
        max_length=16,
        description="Maximum resources, by name (cpu, memory, ...), as quantities.",
    )

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "!has(self.requests) || !has(self.limits) || self.requests.all(k, !(k in self.limits) || "
                "!quantity(string(self.requests[k])).isGreaterThan(quantity(string(self.limits[k]))))",
                "each request must be at most its limit (e.g. requests.memory <= limits.memory)",
                ".requests",
            ),
        )
    )


class AgentSpec(_Model):
    """The ACP agent that runs in the session's pod, and what it needs."""

    type: AgentType = Field(
        default="demo",
        description="Which agent runs. Known types get their image and command from the operator's defaults; "
        "'custom' needs image and command.",
    )
    image: Image | None = Field(
        default=None, description="The agent's image; known types default to the operator's profile."
    )
    imagePullPolicy: Literal["Always", "IfNotPresent", "Never"] | None = Field(
        default=None, description="Pull policy of the agent's image; defaults to the operator's."
    )
    command: list[Annotated[str, StringConstraints(max_length=4096)]] | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="The ACP agent's command; it speaks ACP on stdio.",
    )
    args: list[Annotated[str, StringConstraints(max_length=4096)]] | None = Field(
        default=None, max_length=256, description="Arguments after the command; replace the profile's."
    )
    env: list[EnvVar] | None = Field(
        default=None,
        max_length=256,
        description="Environment of the agent container; wins over the profile's variables of the same name.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    envFrom: list[EnvFromSource] | None = Field(
        default=None, max_length=32, description="ConfigMaps and Secrets whose keys become variables."
    )
    resources: ResourceRequirements | None = Field(
        default=None, description="Compute resources of the agent container."
    )
    credentialsSecretRef: SecretReference | None = Field(
        default=None,
        description="API keys for the agent, from a Secret (never inline). With the release's egress proxy, no "
        "container reads it: the agent holds a stand-in key and the proxy puts in the real one.",
    )
    model: ModelEndpoint | None = Field(
        default=None, description="Where the agent's model API is, when not the vendor's default."
    )
    caBundle: CABundleSource | None = Field(
        default=None, description="Extra CA certificates the agent trusts; overrides the operator's default."
    )

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "self.type != 'custom' || (has(self.image) && has(self.command))",
                "agent.type 'custom' needs agent.image and agent.command",
                ".type",
            ),
            (
                "self.type != 'custom' || !has(self.model)",
                "agent.model needs a known agent.type; for 'custom' set the agent's own variables in agent.env",
                ".model",
            ),
        )
    )


class AgentctlSpec(_Model):
    """The agentctl sidecar: the agent's control plane in the pod."""

    image: Image | None = Field(default=None, description="Defaults to the operator's agentctl image.")
    resources: ResourceRequirements | None = Field(
        default=None, description="Compute resources of the agentctl container."
    )


class RepositorySpec(_Model):
    """A git repository cloned into an empty workspace before the agent starts."""

    url: str = Field(
        min_length=1,
        max_length=2048,
        pattern=r"^(https://|ssh://|git@)[^\s]+$",
        description="Clone URL (https://, ssh:// or git@).",
    )
    ref: str | None = Field(
        default=None, max_length=256, pattern=r"^[^\s]+$", description="Branch or tag to check out."
    )


class WorkspaceSpec(_Model):
    """Where the agent works: a volume mounted in the agent and agentctl containers."""

    size: Quantity | None = Field(
        default=None,
        description="Size of a PersistentVolumeClaim owned by the session, kept while suspended.",
    )
    storageClassName: ObjectName | None = Field(
        default=None, description="StorageClass of the claim; the cluster's default when left out."
    )
    emptyDir: bool | None = Field(
        default=None, description="Use a scratch emptyDir (lost when the pod goes, e.g. on suspend)."
    )
    mountPath: AbsolutePath = Field(
        default="/workspace", description="Where the workspace is mounted; the agent's HOME is under it."
    )
    repository: RepositorySpec | None = Field(default=None, description="A git repository cloned at start.")

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "!(has(self.size) && has(self.emptyDir) && self.emptyDir)",
                "workspace: set size (a persistent volume) or emptyDir: true, not both",
                ".emptyDir",
            ),
            (
                "!has(self.storageClassName) || has(self.size)",
                "workspace.storageClassName needs workspace.size",
                ".storageClassName",
            ),
            (
                "!has(self.size) || quantity(string(self.size)).isGreaterThan(quantity('0'))",
                "workspace.size must be a positive quantity, e.g. 10Gi",
                ".size",
            ),
            (
                "has(oldSelf.size) == has(self.size) && (!has(self.size) || self.size == oldSelf.size)",
                "workspace.size is immutable: create a new AgentSession for another size",
                ".size",
            ),
            (
                "has(oldSelf.storageClassName) == has(self.storageClassName) && "
                "(!has(self.storageClassName) || self.storageClassName == oldSelf.storageClassName)",
                "workspace.storageClassName is immutable",
                ".storageClassName",
            ),
            (
                "!("
                + " || ".join(
                    f"self.mountPath == '{p}'"
                    + (f" || self.mountPath.startsWith('{p}/')" if p != "/" else "")
                    for p in RESERVED_MOUNT_PATHS
                )
                + ")",
                "workspace.mountPath must not be (or be under) a path the pod reserves: "
                + ", ".join(RESERVED_MOUNT_PATHS),
                ".mountPath",
            ),
        )
    )


class LifecycleSpec(_Model):
    """When the session's pod stops by itself, and how."""

    idleTimeout: Duration | None = Field(
        default=None,
        description="Suspend after this long with no turn running, no permission pending and no prompt, update or shell input.",
    )
    maxDuration: Duration | None = Field(default=None, description="Stop the pod after it has run this long.")
    drainTimeout: Duration | None = Field(
        default=None, description="How long a running turn may finish before the pod is stopped."
    )
    restartPolicy: Literal["Always", "Never"] = Field(
        default="Always", description="Always: a failed or evicted pod is replaced. Never: it stays Failed."
    )

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "!has(self.idleTimeout) || !has(self.maxDuration) || "
                "duration(self.idleTimeout) < duration(self.maxDuration)",
                "lifecycle.idleTimeout must be shorter than lifecycle.maxDuration",
                ".idleTimeout",
            ),
            *(
                (
                    f"!has(self.{field}) || (duration(self.{field}) >= duration('1s') && "
                    f"duration(self.{field}) <= duration('{bound}'))",
                    f"lifecycle.{field} must be between 1s and {bound}",
                    f".{field}",
                )
                for field, bound in (
                    ("idleTimeout", "8760h"),
                    ("maxDuration", "8760h"),
                    ("drainTimeout", "1h"),
                )
            ),
        )
    )


class Toleration(_Model):
    """A taint the pod tolerates, as in a Pod."""

    key: str | None = Field(default=None, max_length=317, pattern=LABEL_KEY, description="The taint's key.")
    operator: Literal["Exists", "Equal"] | None = Field(
        default=None, description="Exists matches any value; Equal (the default) the given value."
    )
    value: str | None = Field(
        default=None, max_length=63, pattern=LABEL_VALUE, description="The taint's value."
    )
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="The taint effect to match; all effects when left out."
    )
    tolerationSeconds: int | None = Field(
        default=None, ge=0, description="For NoExecute: how long the pod stays bound after the taint appears."
    )

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
                "a toleration with operator Exists takes no value",
                ".value",
            ),
            (
                "has(self.key) || (has(self.operator) && self.operator == 'Exists')",
                "a toleration without a key needs operator Exists (it tolerates every taint)",
                ".key",
            ),
            (
                "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
                "tolerationSeconds applies to effect NoExecute only",
                ".tolerationSeconds",
            ),
        )
    )


class PodTemplateOverrides(_Model):
    """Settings of the session's pod that users need; everything else the operator decides."""

    labels: dict[str, Annotated[str, StringConstraints(max_length=63)]] | None = Field(
        default=None, max_length=64, description="Extra labels of the pod; the operator's own labels win."
    )
    annotations: dict[str, Annotated[str, StringConstraints(max_length=65536)]] | None = Field(
        default=None, max_length=64, description="Extra annotations of the pod."
    )
    nodeSelector: dict[str, Annotated[str, StringConstraints(max_length=63)]] | None = Field(
        default=None, max_length=64, description="Node labels the pod's node must have, as in a Pod."
    )
    tolerations: list[Toleration] | None = Field(
        default=None, max_length=64, description="Tolerations of the pod."
    )
    affinity: KubeObject | None = Field(default=None, description="core/v1 Affinity of the pod.")
    priorityClassName: ObjectName | None = Field(default=None, description="PriorityClass of the pod.")

    model_config = ConfigDict(
        json_schema_extra=_rules(
            *_keys_and_values("labels", "podTemplate.labels", values=True),
            *_keys_and_values("annotations", "podTemplate.annotations", values=False),
            *_keys_and_values("nodeSelector", "podTemplate.nodeSelector", values=True),
        )
    )


class PoolReference(_Model):
    name: ObjectName = Field(description="An AgentSessionPool in the session's namespace.")


class AgentSessionSpec(_Model):
    """An ACP coding agent run as a pod with the agentctl sidecar: what runs, where it works, and when it stops."""

    # The explicit schema default lets the API server fill in agent.type, which CEL rules rely on.
    agent: AgentSpec = Field(default_factory=AgentSpec, json_schema_extra={"default": {"type": "demo"}})
    agentctl: AgentctlSpec | None = None
    workspace: WorkspaceSpec | None = None
    title: str | None = Field(default=None, max_length=256, description="A name for people, shown by UIs.")
    cwd: AbsolutePath | None = Field(
        default=None, description="The ACP session's cwd; defaults to mountPath."
    )
    mode: str | None = Field(default=None, max_length=64, description="Initial ACP mode id.")
    prompt: str | None = Field(
        default=None,
        max_length=65536,
        description="Sent once, when the session is first created; never on resume.",
    )
    suspend: bool = Field(default=False, description="True keeps the record and workspace but runs no pod.")
    lifecycle: LifecycleSpec | None = None
    podTemplate: PodTemplateOverrides | None = None
    network: NetworkSpec | None = Field(
        default=None,
        description="What the agent may reach through the egress proxy, and whether it may push.",
    )
    budget: Budget | None = Field(
        default=None,
        description="Limits on model use; when one is reached the proxy refuses model calls and the running "
        "turn ends (condition BudgetExhausted).",
    )
    poolRef: PoolReference | None = Field(
        default=None,
        description="At the first start, claim a warm pod of this AgentSessionPool (its template must give the "
        "pod this session asks for); without one that fits, the session starts cold and status.startup says why.",
    )

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "self.agent.type == oldSelf.agent.type",
                "agent.type cannot change after creation",
                ".agent.type",
            ),
            (
                "has(oldSelf.workspace) == has(self.workspace)",
                "workspace cannot be added or removed after creation",
                ".workspace",
            ),
        )
    )


class Condition(_Model):
    type: ConditionType
    status: ConditionStatus
    reason: str = Field(min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    message: str = Field(default="", max_length=32768)
    lastTransitionTime: datetime
    observedGeneration: int | None = Field(default=None, ge=0)


class AcpStatus(_Model):
    """What agentctl reported of the ACP session. The agent chose its strings and lists, so each is bounded: the
    operator cuts what is longer, and the API server refuses it."""

    sessionId: SessionId | None = None
    currentModeId: CurrentModeId = None
    availableModes: Modes | None = None
    agentInfo: AgentIdentity | None = None
    podUID: str | None = Field(default=None, description="The pod whose agentctl was initialized.")
    agentctlRestartCount: int | None = Field(
        default=None, ge=0, description="agentctl restarts at init time."
    )
    agentRestartCount: int | None = Field(
        default=None, ge=0, description="The agent container's restarts at init time."
    )
    initializedTime: datetime | None = None
    lastError: str | None = Field(default=None, max_length=4096)


StartSource = Literal["Claimed", "Cold"]


class StartupTimings(_Model):
    """How the session's first pod came (claimed from a pool or started cold), and seconds from pod creation to
    each startup stage of the current pod."""

    source: StartSource | None = None
    pool: str | None = Field(
        default=None, description="The AgentSessionPool of spec.poolRef, when one was asked."
    )
    member: str | None = Field(
        default=None,
        description="The claimed pool pod's name stem: the session's pod, token Secret and workspace claim are "
        "named after it, as they are after the session's name otherwise.",
    )
    reason: str | None = Field(default=None, description="Why a session with spec.poolRef started cold.")
    message: str | None = Field(default=None, max_length=1024)
    scheduledSeconds: float | None = None
    agentctlReadySeconds: float | None = None
    initializedSeconds: float | None = None


class AgentSessionStatus(_Model):
    phase: Phase | None = None
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    observedGeneration: int | None = Field(default=None, ge=0)
    podName: str | None = None
    podUID: str | None = None
    podIP: str | None = None
    agentctlEndpoint: str | None = None
    startTime: datetime | None = None
    readyTime: datetime | None = None
    restartCount: int | None = Field(default=None, ge=0, description="Container restarts in the current pod.")
    podsCreated: int | None = Field(default=None, ge=0, description="Pods created for this session so far.")
    acp: AcpStatus | None = None
    startup: StartupTimings | None = None
    usage: Usage | None = Field(
        default=None,
        description="Model use so far, metered by the egress proxy; kept across pods and restarts.",
    )

    def condition(self, kind: ConditionType) -> Condition | None:
        return next((c for c in self.conditions if c.type == kind), None)


# The fields of an AgentSession that shape its pod: what a pool's template holds.
POD_SHAPE_FIELDS = ("agent", "agentctl", "workspace", "cwd", "lifecycle", "podTemplate")


class _PodShape(_Model):
    """The pod a pool keeps warm: the fields of an AgentSession that shape its pod. A session claims one of the
    pool's pods only when its own fields give the same pod."""

    def session_spec(self) -> AgentSessionSpec:
        return AgentSessionSpec.model_validate(self.model_dump(exclude_none=True))


if TYPE_CHECKING:
    # The type checker sees the base: code reads a template only through session_spec().
    PoolTemplate = _PodShape
else:
    # Taken from AgentSessionSpec, so that the two cannot drift: a field's type, default and bounds are its.
    PoolTemplate = create_model(
        "PoolTemplate",
        __base__=_PodShape,
        __doc__=_PodShape.__doc__,
        **{
            name: (AgentSessionSpec.model_fields[name].annotation, AgentSessionSpec.model_fields[name])
            for name in POD_SHAPE_FIELDS
        },
    )


RefillPolicy = Literal["Always", "Never"]


class AgentSessionPoolSpec(_Model):
    """Pods started ahead of sessions: agentctl ready and the agent initialized, waiting for a session to claim
    one through spec.poolRef."""

    replicas: int = Field(default=1, ge=0, le=100, description="Warm pods to keep.")
    template: PoolTemplate = Field(
        default_factory=PoolTemplate, json_schema_extra={"default": {"agent": {"type": "demo"}}}
    )
    refillPolicy: RefillPolicy = Field(
        default="Always",
        description="Always: replace a claimed pod at once. Never: claims shrink the pool until replicas changes.",
    )


class AgentSessionPoolStatus(_Model):
    replicas: int = Field(default=0, ge=0, description="Warm pods that exist.")
    readyReplicas: int = Field(default=0, ge=0, description="Warm pods a session can claim now.")
    claimed: int = Field(default=0, ge=0, description="Pods of this pool that sessions hold now.")
    observedGeneration: int | None = Field(
        default=None, ge=0, description="The generation of the spec the pool was last filled for."
    )
