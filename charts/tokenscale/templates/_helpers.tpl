{{/*
Named templates shared by every manifest of the chart: names, labels, images and the pod
security settings every pod must carry.
*/}}

{{/* The chart name, or nameOverride. */}}
{{- define "tokenscale.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object name: fullnameOverride, or "<release>-<chart>" (just the release
name when it already contains the chart name). Kept to 45 characters so that
"<prefix>-<component>-<suffix>" still fits the 63 characters of a DNS label.
*/}}
{{- define "tokenscale.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 45 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 45 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 45 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/* Name of one component's objects: "<fullname>-<component>". Call with (list $ "gateway"). */}}
{{- define "tokenscale.componentName" -}}
{{- printf "%s-%s" (include "tokenscale.fullname" (index . 0)) (index . 1) }}
{{- end }}

{{/* Labels on every object. */}}
{{- define "tokenscale.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tokenscale
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Selector labels of one component; stable across upgrades. Call with (list $ "gateway"). */}}
{{- define "tokenscale.selectorLabels" -}}
{{- $root := index . 0 -}}
app.kubernetes.io/name: {{ include "tokenscale.name" $root }}
app.kubernetes.io/instance: {{ $root.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end }}

{{/* All labels of one component's objects. Call with (list $ "gateway"). */}}
{{- define "tokenscale.componentLabels" -}}
{{ include "tokenscale.labels" (index . 0) }}
{{ include "tokenscale.selectorLabels" . }}
{{- end }}

{{/* "registry/repository:tag" (or "@digest"). Call with (list $ .Values.gateway.image). */}}
{{- define "tokenscale.image" -}}
{{- $root := index . 0 -}}
{{- $image := index . 1 }}
{{- $repository := $image.repository }}
{{- with $root.Values.imageRegistry }}
{{- $repository = printf "%s/%s" (trimSuffix "/" .) $repository }}
{{- end }}
{{- $tag := default $root.Chart.AppVersion $image.tag }}
{{- if hasPrefix "sha256:" $tag }}
{{- printf "%s@%s" $repository $tag }}
{{- else }}
{{- printf "%s:%s" $repository $tag }}
{{- end }}
{{- end }}

{{/* The operator's and the gateway's ServiceAccount names. */}}
{{- define "tokenscale.operator.serviceAccountName" -}}
{{- include "tokenscale.componentName" (list . "operator") }}
{{- end }}
{{- define "tokenscale.gateway.serviceAccountName" -}}
{{- include "tokenscale.componentName" (list . "gateway") }}
{{- end }}

{{/* Namespace of the operator's leader-election Lease. */}}
{{- define "tokenscale.leaseNamespace" -}}
{{- default .Release.Namespace .Values.operator.leaderElection.leaseNamespace }}
{{- end }}

{{/* The peers the engine NetworkPolicy admits (the operator's --engine-ingress-from): the
gateway and the operator pods of this release, plus networkPolicy.extraScrapers; as JSON. */}}
{{- define "tokenscale.engineIngressFrom" -}}
{{- $peers := list -}}
{{- range $component := list "gateway" "operator" -}}
{{- $selector := include "tokenscale.selectorLabels" (list $ $component) | fromYaml -}}
{{- $peers = append $peers (dict "namespaceSelector" (dict "matchLabels" (dict "kubernetes.io/metadata.name" $.Release.Namespace)) "podSelector" (dict "matchLabels" $selector)) -}}
{{- end -}}
{{- concat $peers .Values.networkPolicy.extraScrapers | toJson -}}
{{- end }}

{{/* Pod-level security context of every pod: non-root, RuntimeDefault seccomp. */}}
{{- define "tokenscale.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.podSecurity.runAsUser }}
runAsGroup: {{ .Values.podSecurity.runAsGroup }}
fsGroup: {{ .Values.podSecurity.runAsGroup }}
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* Container-level security context of every container: the restricted Pod Security
Standard plus a read-only root filesystem. */}}
{{- define "tokenscale.containerSecurityContext" -}}
runAsNonRoot: true
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* A claim's storageClassName from a storageClass value (the argument): empty renders
nothing (the cluster's default class); "-" asks for no class at all (a pre-provisioned
volume), not the default. */}}
{{- define "tokenscale.storageClassName" -}}
{{- with . -}}
storageClassName: {{ ternary "" . (eq . "-") | quote }}
{{- end }}
{{- end }}

{{/* Default anti-affinity: spread one component's replicas over nodes when possible. */}}
{{- define "tokenscale.spreadAffinity" -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels:
            {{- include "tokenscale.selectorLabels" . | nindent 12 }}
{{- end }}

{{/* The label the operator puts on every engine pod it creates (operator/src/children:
selector_labels); the NetworkPolicy and the PodMonitor select engine pods by it. */}}
{{- define "tokenscale.enginePodLabels" -}}
app.kubernetes.io/name: tokenscale-engine
{{- end }}

{{/* True when the Prometheus Operator's API is served (ServiceMonitor/PodMonitor exist). */}}
{{- define "tokenscale.hasMonitoringApi" -}}
{{- if .Capabilities.APIVersions.Has "monitoring.coreos.com/v1" }}true{{ end }}
{{- end }}

{{/* The ValidatingAdmissionPolicy API to write the operator's policies in: v1 from
Kubernetes 1.30 (GA); on 1.29 v1beta1 where the cluster serves it (a feature gate and a
runtime-config flag turn it on); else empty, and the policies are left out. */}}
{{- define "tokenscale.admissionPolicyApi" -}}
{{- if semverCompare ">=1.30.0-0" .Capabilities.KubeVersion.Version }}admissionregistration.k8s.io/v1
{{- else if .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1beta1/ValidatingAdmissionPolicy" }}admissionregistration.k8s.io/v1beta1
{{- end }}
{{- end }}
