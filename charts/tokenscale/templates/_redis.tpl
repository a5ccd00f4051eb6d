{{/* Shared limits and the chart's own Redis: whether it runs, the Secret of its password,
and the refusal of several gateway pods that would each limit alone (issue 36). */}}

{{/* "true" when more than one gateway pod can run at once: gateway.replicas > 1, or the
HPA on with maxReplicas > 1. Empty otherwise. */}}
{{- define "tokenscale.gateway.severalPods" -}}
{{- $gw := .Values.gateway }}
{{- if ternary (gt (int $gw.autoscaling.maxReplicas) 1) (gt (int $gw.replicas) 1) $gw.autoscaling.enabled -}}
true
{{- end }}
{{- end }}

{{/* "true" when the chart runs its own Redis: redis.enabled true, or "auto" with several
gateway pods and no other store named (redis.url, or a `store` in gateway.config.limits,
e.g. a Sentinel or a Cluster). Empty otherwise. */}}
{{- define "tokenscale.redis.bundled" -}}
{{- $redis := .Values.redis }}
{{- $enabled := toString $redis.enabled }}
{{- $configStore := dig "limits" "store" "" .Values.gateway.config }}
{{- if not $redis.url }}
{{- if eq $enabled "true" -}}
true
{{- else if and (eq $enabled "auto") (include "tokenscale.gateway.severalPods" .) (not $configStore) -}}
true
{{- end }}
{{- end }}
{{- end }}

{{/* The Secret holding the Redis password: redis.passwordSecret.name, else the one the chart
generates for its own Redis; empty when neither (your redis.url without a password). */}}
{{- define "tokenscale.redis.passwordSecretName" -}}
{{- if .Values.redis.passwordSecret.name -}}
{{ .Values.redis.passwordSecret.name }}
{{- else if include "tokenscale.redis.bundled" . -}}
{{ include "tokenscale.componentName" (list . "redis") }}-password
{{- end }}
{{- end }}

{{/* Fails the render when several gateway pods would limit alone: each pod then enforces
every tenant's quota by itself (a tenant gets up to N times it) and admits each engine's
full concurrency (engines get N times what they were sized for). `config` is the gateway's
merged gateway.yaml as a dict. */}}
{{- define "tokenscale.sharedLimits.check" -}}
{{- $ := index . 0 }}
{{- $config := index . 1 }}
{{- $gw := $.Values.gateway }}
{{- if and (include "tokenscale.gateway.severalPods" $) (ne (dig "limits" "store" "memory" $config) "redis") }}
{{- $n := ternary $gw.autoscaling.maxReplicas $gw.replicas $gw.autoscaling.enabled }}
{{- $pods := ternary (printf "up to %v gateway pods (gateway.autoscaling.maxReplicas: %v)" $n $n) (printf "%v gateway pods (gateway.replicas: %v)" $n $n) $gw.autoscaling.enabled }}
{{- $why := printf "redis.enabled is %v and redis.url is empty" $.Values.redis.enabled }}
{{- $fix := "set redis.enabled to auto (the default) or true for the chart's Redis, or redis.url for your own" }}
{{- with dig "limits" "store" "" $gw.config }}
{{- $why = printf "gateway.config.limits.store is %v" . }}
{{- $fix = "set gateway.config.limits.store to redis (with its redis_url, redis_cluster_urls or redis_sentinel), or remove it and let the chart's Redis or redis.url serve" }}
{{- end }}
{{- fail (printf "%s without shared limits (%s): each pod would enforce every tenant's quota alone, so a tenant would get up to %v times its quota, and engines up to %v times the concurrency they are sized for. To share limits, %s; or run one pod: gateway.replicas: 1 with gateway.autoscaling.enabled: false." $pods $why $n $n $fix) }}
{{- end }}
{{- end }}
