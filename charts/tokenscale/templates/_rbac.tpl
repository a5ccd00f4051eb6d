{{/*
RBAC rules, written once and used both cluster-wide (ClusterRole) and per namespace (Role,
namespaced mode). Each rule lists exactly the verbs the program calls; no wildcards.
*/}}

{{/* What the operator does to the objects of the namespaces it watches. */}}
{{- define "tokenscale.operator.rules" -}}
# The Controller's list+watch of ModelDeployments (operator/src/controller/mod.rs).
- apiGroups: ["tokenscale.dev"]
  resources: ["modeldeployments"]
  verbs: ["list", "watch"]
# patch_status: conditions, observations, decisions (controller/apply.rs).
- apiGroups: ["tokenscale.dev"]
  resources: ["modeldeployments/status"]
  verbs: ["patch"]
# Children carry ownerReferences with blockOwnerDeletion, which needs update on the owner's
# finalizers where the OwnerReferencesPermissionEnforcement admission plugin runs.
- apiGroups: ["tokenscale.dev"]
  resources: ["modeldeployments/finalizers"]
  verbs: ["update"]
# Owned children: server-side apply (create + patch), watched through .owns(); the scale
# target reads its Deployment (get) and sets replicas through the scale subresource.
- apiGroups: ["apps"]
  resources: ["deployments"]
  verbs: ["get", "list", "watch", "create", "patch"]
- apiGroups: ["apps"]
  resources: ["deployments/scale"]
  verbs: ["patch"]
- apiGroups: [""]
  resources: ["services"]
  verbs: ["list", "watch", "create", "patch"]
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["list", "watch", "create", "patch"]
# model.cache.fill (controller/fill.rs): the cache claim, applied; its fill Job, read (get)
# and applied once; a filling model is looked at again every 10 s, so nothing is watched.
- apiGroups: [""]
  resources: ["persistentvolumeclaims"]
  verbs: ["create", "patch"]
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "create", "patch"]
{{- if .Values.networkPolicy.enabled }}
# The engine NetworkPolicy of each ModelDeployment (children/network_policy.rs), applied.
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["create", "patch"]
{{- end }}
# controller.kubernetes.io/pod-deletion-cost on the least-loaded pod before a scale-in; a
# model's engine pods listed while a replica starts (status.coldStartPhases).
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["list", "patch"]
# Ready engine endpoints to scrape (metrics_source/discovery.rs).
- apiGroups: ["discovery.k8s.io"]
  resources: ["endpointslices"]
  verbs: ["list"]
# An Event for every scale decision (kube's Recorder creates, then patches repeats).
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}

{{/* The operator's leader election: one Lease in the lease namespace. */}}
{{- define "tokenscale.operator.leaseRules" -}}
- apiGroups: ["coordination.k8s.io"]
  resources: ["leases"]
  verbs: ["get", "create", "update"]
{{- end }}

{{/* The gateway only reads, through reflectors (list + watch): which models exist and
their ready endpoints (gateway/src/discovery/kubernetes.rs). */}}
{{- define "tokenscale.gateway.rules" -}}
# Served names and routes (gateway/src/discovery/kubernetes.rs): list+watch only.
- apiGroups: ["tokenscale.dev"]
  resources: ["modeldeployments", "modelroutes"]
  verbs: ["list", "watch"]
- apiGroups: ["discovery.k8s.io"]
  resources: ["endpointslices"]
  verbs: ["list", "watch"]
{{- end }}

{{/* Namespaced mode: the operator scrapes the gateway's /metrics through the gateway
Service's EndpointSlices in the release namespace. */}}
{{- define "tokenscale.operator.gatewayScrapeRules" -}}
- apiGroups: ["discovery.k8s.io"]
  resources: ["endpointslices"]
  verbs: ["list"]
{{- end }}

{{/* Where the operator and the gateway act: the listed namespaces (the default), or the
whole cluster only when asked for with clusterWide and no list. Any other combination fails
the render with the reason, so an empty list never widens access by accident. */}}
{{- define "tokenscale.checkWatchScope" -}}
{{- if and .Values.clusterWide .Values.watchNamespaces }}
{{- fail (printf "clusterWide: true acts in every namespace, but watchNamespaces lists %s: set watchNamespaces: [] with clusterWide, or clusterWide: false for namespaced mode" (join ", " .Values.watchNamespaces)) }}
{{- end }}
{{- if and (not .Values.clusterWide) (not .Values.watchNamespaces) }}
{{- fail "watchNamespaces is empty: list the namespaces the operator and the gateway may act in (namespaced mode, the default), or set clusterWide: true to give them the whole cluster" }}
{{- end }}
{{- end }}
