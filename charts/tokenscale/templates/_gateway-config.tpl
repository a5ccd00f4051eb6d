{{/* The gateway's gateway.yaml (see the README's gateway section): models come from the
ModelDeployments the gateway may watch, tenants from the mounted Secret, plus whatever
gateway.config adds (queue, tokens, health, upstream, models, ...). */}}
{{- define "tokenscale.gateway.config" -}}
{{- $kubernetes := dict }}
{{- if eq (len .Values.watchNamespaces) 1 }}
{{- $_ := set $kubernetes "namespace" (first .Values.watchNamespaces) }}
{{- else if .Values.watchNamespaces }}
{{- $_ := set $kubernetes "namespaces" .Values.watchNamespaces }}
{{- end }}
{{- $config := dict "kubernetes" $kubernetes "tenants_file" "/etc/tokenscale/tenants/tenants.yaml" }}
{{- toYaml (mergeOverwrite $config (deepCopy .Values.gateway.config)) }}
{{- end }}
