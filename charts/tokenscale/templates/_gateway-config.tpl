{{/* The gateway's gateway.yaml (see the README's gateway section): models come from the
ModelDeployments the gateway may watch, tenants from the mounted Secret, the Batch API's
stores from gateway.batch, plus whatever gateway.config adds or overrides (queue, tokens,
health, upstream, models, batch, ...). */}}
{{- define "tokenscale.gateway.config" -}}
{{- $kubernetes := dict }}
{{- if eq (len (.Values.watchNamespaces | default list)) 1 }}
{{- $_ := set $kubernetes "namespace" (first .Values.watchNamespaces) }}
{{- else if .Values.watchNamespaces }}
{{- $_ := set $kubernetes "namespaces" .Values.watchNamespaces }}
{{- end }}
{{- with .Values.servedNames }}
{{- $_ := set $kubernetes "served_names" . }}
{{- end }}
{{- $config := dict "kubernetes" $kubernetes "tenants_file" "/etc/tokenscale/tenants/tenants.yaml" }}
{{- $redisUrl := include "tokenscale.redisUrl" . }}
{{- if $redisUrl }}
{{- $_ := set $config "limits" (dict "store" "redis" "redis_url" $redisUrl) }}
{{- end }}
{{- if .Values.gateway.engineApiKey.secretName }}
{{- $_ := set $config "upstream" (dict "engine_api_key_env" "TOKENSCALE_ENGINE_API_KEY") }}
{{- end }}
{{- $_ := set $config "batch" (include "tokenscale.gateway.batchConfig" . | fromYaml) }}
{{- $config = mergeOverwrite $config (deepCopy .Values.gateway.config) }}
{{- include "tokenscale.sharedLimits.check" (list . $config) }}
{{- toYaml $config }}
{{- end }}

{{/* The Redis the gateway pods share limits through: redis.url or the chart's own (see
tokenscale.redis.bundled); empty when neither (each pod limits alone). */}}
{{- define "tokenscale.redisUrl" -}}
{{- if .Values.redis.url -}}
{{ .Values.redis.url }}
{{- else if include "tokenscale.redis.bundled" . -}}
redis://{{ include "tokenscale.componentName" (list . "redis") }}.{{ .Release.Namespace }}.svc:6379/0
{{- end -}}
{{- end }}

{{/* How the gateway keeps Batch API work (gateway.batch), one of:
  disabled  gateway.batch.enabled is false;
  shared    job state in the Redis of `limits:`, files in gateway.batch.objects: any number
            of pods see the same batches;
  local     one pod: state (and files, unless gateway.batch.objects) under batchDir, on a
            PersistentVolumeClaim or an emptyDir;
  unshared  several pods and no shared mode: off, since each pod would answer only for the
            batches it created and a pod's end would take its batches with it.
Fails on settings that cannot work together. */}}
{{- define "tokenscale.gateway.batchMode" -}}
{{- $gw := .Values.gateway }}
{{- $batch := $gw.batch }}
{{- $severalPods := include "tokenscale.gateway.severalPods" . }}
{{- $shared := and $batch.objects (include "tokenscale.redisUrl" .) }}
{{- if and $batch.enabled $batch.persistence.enabled $severalPods }}
{{- fail "gateway.batch.persistence needs a single gateway pod (gateway.replicas: 1, gateway.autoscaling.enabled: false): the local batch state belongs to one pod and its ReadWriteOnce volume mounts in one pod. For several gateway pods set gateway.batch.objects (an S3 bucket) and Redis (redis.enabled or redis.url) instead, and gateway.batch.persistence.enabled: false." }}
{{- end }}
{{- if and $batch.enabled $batch.persistence.enabled $shared }}
{{- fail "gateway.batch.persistence is for the local mode of one pod, but gateway.batch.objects and Redis are set: batches then live in Redis and the bucket. Set gateway.batch.persistence.enabled: false." }}
{{- end }}
{{- if not $batch.enabled -}}
disabled
{{- else if $shared -}}
shared
{{- else if $severalPods -}}
unshared
{{- else -}}
local
{{- end -}}
{{- end }}

{{/* Where the local mode mounts its volume and points batch.dir. */}}
{{- define "tokenscale.gateway.batchDir" -}}
/var/lib/tokenscale/batch
{{- end }}

{{/* The chart's `batch:` section of gateway.yaml for the mode above; gateway.config.batch
is merged over it. */}}
{{- define "tokenscale.gateway.batchConfig" -}}
{{- $mode := include "tokenscale.gateway.batchMode" . }}
{{- $objects := .Values.gateway.batch.objects }}
{{- if eq $mode "shared" }}
{{- toYaml (dict "state" "redis" "objects" $objects) }}
{{- else if eq $mode "local" }}
{{- $local := dict "dir" (include "tokenscale.gateway.batchDir" .) }}
{{- with $objects }}
{{- $_ := set $local "objects" . }}
{{- end }}
{{- toYaml $local }}
{{- else }}
{{- toYaml (dict "enabled" false) }}
{{- end }}
{{- end }}
