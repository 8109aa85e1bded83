{{/* Names are cut at 63 characters: Kubernetes object names and label values allow no more. */}}
{{- define "agentsession.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "agentsession.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "agentsession.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "agentsession.labels" -}}
helm.sh/chart: {{ include "agentsession.chart" . }}
{{ include "agentsession.selectorLabels" . }}
app.kubernetes.io/version: {{ .Values.image.tag | default .Chart.AppVersion | trunc 63 | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: agentsession
{{- end }}

{{- define "agentsession.selectorLabels" -}}
app.kubernetes.io/name: {{ include "agentsession.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels of one component: pass (dict "root" $ "component" "operator"). */}}
{{- define "agentsession.componentLabels" -}}
{{ include "agentsession.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "agentsession.componentSelectorLabels" -}}
{{ include "agentsession.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "agentsession.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{- define "agentsession.sessionImage" -}}
{{- .Values.operator.sessionImage | default (include "agentsession.image" .) }}
{{- end }}

{{- define "agentsession.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create }}
{{- .Values.operator.serviceAccount.name | default (printf "%s-operator" (include "agentsession.fullname" .) | trunc 63 | trimSuffix "-") }}
{{- else }}
{{- .Values.operator.serviceAccount.name | default "default" }}
{{- end }}
{{- end }}

{{- define "agentsession.gateway.serviceAccountName" -}}
{{- if .Values.gateway.serviceAccount.create }}
{{- .Values.gateway.serviceAccount.name | default (printf "%s-gateway" (include "agentsession.fullname" .) | trunc 63 | trimSuffix "-") }}
{{- else }}
{{- .Values.gateway.serviceAccount.name | default "default" }}
{{- end }}
{{- end }}

{{/* "true" when the operator is leader-elected: asked for, or needed because it runs more than one replica. */}}
{{- define "agentsession.operator.leaderElection" -}}
{{- if or .Values.operator.leaderElection.enabled (gt (int .Values.operator.replicas) 1) }}true{{ end }}
{{- end }}

{{/* The operator's Lease, in the release namespace. */}}
{{- define "agentsession.operator.leaseName" -}}
{{- printf "%s-operator" (include "agentsession.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The namespaces the operator serves, as a JSON list for AGENTSESSION_NAMESPACES: the configured ones,
or in namespace scope the release namespace; empty means cluster-wide.
*/}}
{{- define "agentsession.watchNamespaces" -}}
{{- if .Values.watchNamespaces }}
{{- toJson (.Values.watchNamespaces | uniq) }}
{{- else if eq .Values.rbac.scope "namespace" }}
{{- toJson (list .Release.Namespace) }}
{{- else }}
{{- toJson (list) }}
{{- end }}
{{- end }}

{{/* The Secret holding the release key every agentctl token is derived from, and where both programs mount it. */}}
{{- define "agentsession.agentctlKeySecret" -}}
{{- .Values.agentctlKey.existingSecret | default (printf "%s-agentctl-key" (include "agentsession.fullname" .) | trunc 63 | trimSuffix "-") }}
{{- end }}

{{- define "agentsession.agentctlKeyDir" -}}
/var/run/secrets/agentsession.dev/agentctl-key
{{- end }}

{{/* The volume of that Secret, for the operator's and the gateway's pods. */}}
{{- define "agentsession.agentctlKeyVolume" -}}
- name: agentctl-key
  secret:
    secretName: {{ include "agentsession.agentctlKeySecret" . }}
    items:
      - key: key
        path: key
    defaultMode: 0440
{{- end }}

{{/* The NetworkPolicy the operator keeps in each namespace with session pods (AGENTSESSION_AGENTCTL_NETWORK_POLICY). */}}
{{- define "agentsession.agentctlNetworkPolicy" -}}
{{- $clients := dict "app.kubernetes.io/name" (include "agentsession.name" .) "app.kubernetes.io/instance" .Release.Name }}
{{- toJson (dict "name" (printf "%s-agentctl" (include "agentsession.fullname" .) | trunc 63 | trimSuffix "-") "clientNamespace" .Release.Namespace "clientLabels" $clients) }}
{{- end }}

{{/* The fields of an AgentSession's spec (api/models.py AgentSessionSpec; a chart test keeps the two equal). */}}
{{- define "agentsession.sessionSpecFields" -}}
["agent", "agentctl", "workspace", "title", "cwd", "mode", "prompt", "suspend", "lifecycle", "podTemplate", "poolRef", "network", "budget"]
{{- end }}

{{/* `system:serviceaccount:<namespace>:<name>`: how the API server names a service account's requests. */}}
{{- define "agentsession.operator.username" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "agentsession.operator.serviceAccountName" .) }}
{{- end }}

{{- define "agentsession.gateway.username" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "agentsession.gateway.serviceAccountName" .) }}
{{- end }}

{{/* Rules shared by the operator's ClusterRole (scope=cluster) and its per-namespace Roles. */}}
{{- define "agentsession.operatorRules" -}}
- apiGroups: [agentsession.dev]
  resources: [agentsessions]
  verbs: [get, list, watch, patch]
- apiGroups: [agentsession.dev]
  resources: [agentsessions/status]
  verbs: [get, patch]
# Pools: their users own the spec; the operator keeps their pods and reports them in the status.
- apiGroups: [agentsession.dev]
  resources: [agentsessionpools]
  verbs: [get, list, watch, patch]
- apiGroups: [agentsession.dev]
  resources: [agentsessionpools/status]
  verbs: [get, patch, update]
# patch: a claimed pool pod and its children change owner and labels, from the pool to the session.
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, create, patch, delete]
# Only the agentctl token Secrets of sessions and pool pods, which it creates and reads back by name; delete:
# a pool that shrinks removes its unclaimed pods' Secrets. Writes are bounded to its own Secrets by an admission
# policy (admission-policies.yaml); reads cannot be, so namespace scope is the bound for them.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get, create, patch, delete]
- apiGroups: [""]
  resources: [persistentvolumeclaims]
  verbs: [get, create, patch, delete]
# list: the newest probe-failure Event of a pod becomes the session's condition message.
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, list]
{{- if .Values.egressProxy.enabled }}
# The layered budget: a namespace's annotation `agentsession.dev/budget` (by name only).
- apiGroups: [""]
  resources: [namespaces]
  verbs: [get]
{{- end }}
{{- if .Values.networkPolicy.enabled }}
# The NetworkPolicy that guards agentctl, in each namespace where it creates pods: created, read back, put back.
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [get, create, patch]
{{- end }}
{{- end }}

{{- define "agentsession.gatewayRules" -}}
# patch: a client's initialize (or suspend) request sets spec.suspend, and nothing else (an admission policy,
# admission-policies.yaml, refuses any other change). No Secrets: agentctl tokens are derived from the release key.
- apiGroups: [agentsession.dev]
  resources: [agentsessions]
  verbs: [get, list, watch, patch]
{{- end }}

{{- /* Agent profiles for AGENTSESSION_AGENT_PROFILES: the values' fields, with each empty image derived from
the project image's repository and tag. */ -}}
{{- define "agentsession.agentProfiles" -}}
{{- $profiles := dict }}
{{- range $type, $profile := .Values.agents }}
{{- $fields := omit $profile "image" }}
{{- $image := $profile.image | default (printf "%s-%s:%s" $.Values.image.repository $type ($.Values.image.tag | default $.Chart.AppVersion)) }}
{{- $_ := set $fields "image" $image }}
{{- $_ := set $profiles $type $fields }}
{{- end }}
{{- toJson $profiles }}
{{- end }}

{{- define "agentsession.egressProxy.serviceAccountName" -}}
{{- if .Values.egressProxy.serviceAccount.create }}
{{- .Values.egressProxy.serviceAccount.name | default (printf "%s-egress-proxy" (include "agentsession.fullname" .) | trunc 63 | trimSuffix "-") }}
{{- else }}
{{- .Values.egressProxy.serviceAccount.name | default "default" }}
{{- end }}
{{- end }}

{{/* The egress proxy's Service (and Deployment, ConfigMap, PDB) name. */}}
{{- define "agentsession.egressProxy.name" -}}
{{- printf "%s-egress-proxy" (include "agentsession.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Where the operator points session pods (AGENTSESSION_EGRESS_PROXY): the proxy's Service, whose ClusterIP it
reads, and the git hosts whose URLs the agent's git rewrites to the proxy. */}}
{{- define "agentsession.egressProxy.operatorSetting" -}}
{{- toJson (dict "serviceNamespace" .Release.Namespace "serviceName" (include "agentsession.egressProxy.name" .) "port" (int .Values.egressProxy.port) "gitHosts" .Values.egressProxy.git.hosts) }}
{{- end }}

{{/* The egress proxy's rules (ClusterRole in cluster scope, a Role per watched namespace otherwise): it finds a
request's pod by the phantom's digest and the peer's IP (pods), reads the layered defaults (namespaces) and the
session's allowlist and budget (agentsessions), adds usage into the status, reads the real key from the session's
credentials Secret by name (never list or watch), and posts EgressDenied Events. */}}
{{- define "agentsession.egressProxyRules" -}}
- apiGroups: [""]
  resources: [pods, namespaces]
  verbs: [get, list, watch]
- apiGroups: [agentsession.dev]
  resources: [agentsessions]
  verbs: [get, list, watch]
# patch only: usage is merged with a resourceVersion precondition, so two replicas add up.
- apiGroups: [agentsession.dev]
  resources: [agentsessions/status]
  verbs: [get, patch]
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
# patch: a repeated denial raises the count of its Event instead of adding one.
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end }}
