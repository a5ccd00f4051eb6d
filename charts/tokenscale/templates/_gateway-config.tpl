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
{{- $redisUrl := include "tokenscale.redisUrl" . }}
{{- if $redisUrl }}
{{- $_ := set $config "limits" (dict "store" "redis" "redis_url" $redisUrl) }}
{{- end }}
{{- if .Values.gateway.engineApiKey.secretName }}
{{- $_ := set $config "upstream" (dict "engine_api_key_env" "TOKENSCALE_ENGINE_API_KEY") }}
{{- end }}
{{- toYaml (mergeOverwrite $config (deepCopy .Values.gateway.config)) }}
{{- end }}

{{/* The Redis the gateway pods share limits through: the chart's own (redis.enabled) or
redis.url; empty when neither (each pod limits alone). */}}
{{- define "tokenscale.redisUrl" -}}
{{- if .Values.redis.url -}}
{{ .Values.redis.url }}
{{- else if .Values.redis.enabled -}}
redis://{{ include "tokenscale.componentName" (list . "redis") }}.{{ .Release.Namespace }}.svc:6379/0
{{- end -}}
{{- end }}
