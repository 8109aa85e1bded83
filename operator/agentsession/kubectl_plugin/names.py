"""The project's and the chart's names the plugin speaks: the same values as agentsession.api.constants, the
gateway's task dialect and the chart's templates, repeated because the plugin must run alone (a unit test keeps
them equal)."""

GROUP = "agentsession.dev"
VERSION = "v1alpha1"
PLURAL = "agentsessions"
TASK_DIALECT = "task-session.v1"
# The chart labels its gateway Service so, and says in an annotation which namespaces the gateway serves.
GATEWAY_SELECTOR = "app.kubernetes.io/name=agentsession,app.kubernetes.io/component=gateway"
NAMESPACES_ANNOTATION = "agentsession.dev/namespaces"
# The audience the chart's gateway takes tokens for (its `gateway.auth.audiences`).
GATEWAY_AUDIENCE = "agentsession-gateway"
