{{/* Names and labels, the usual way. */}}
{{- define "tokengate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "tokengate.fullname" -}}
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

{{- define "tokengate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tokengate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tokengate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "tokengate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "tokengate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tokengate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "tokengate.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
tokengate.policyText: the text of the policy file policy.content gives: unset
(null), the chart's files/policy.yaml; otherwise tokengate.yamlText of it ("" for
the policy built into the binary).
*/}}
{{- define "tokengate.policyText" -}}
{{- if kindIs "invalid" .Values.policy.content }}
{{- .Files.Get "files/policy.yaml" }}
{{- else }}
{{- include "tokengate.yamlText" .Values.policy.content }}
{{- end }}
{{- end }}

{{/* tokengate.yamlText: a policy given as values as file text: a map as YAML, a string as it is. */}}
{{- define "tokengate.yamlText" -}}
{{- if kindIs "map" . }}
{{- toYaml . }}
{{- else if . }}
{{- . }}
{{- end }}
{{- end }}

{{/* The ConfigMap holding the policy, "" for the built-in policy. */}}
{{- define "tokengate.policyConfigMap" -}}
{{- if .Values.policy.existingConfigMap }}
{{- .Values.policy.existingConfigMap }}
{{- else if include "tokengate.policyText" . }}
{{- printf "%s-policy" (include "tokengate.fullname" .) }}
{{- end }}
{{- end }}

{{/* The most pods that can run at once. */}}
{{- define "tokengate.maxReplicas" -}}
{{- if .Values.autoscaling.enabled }}{{ int .Values.autoscaling.maxReplicas }}{{ else }}{{ int .Values.replicaCount }}{{ end }}
{{- end }}

{{/*
tokengate.validate stops the rendering of settings that would deploy
something other than what the user believes.
*/}}
{{- define "tokengate.validate" -}}
{{- if not (has .Values.store (list "memory" "redis")) }}
{{- fail (printf "store %q: want memory or redis" .Values.store) }}
{{- end }}
{{- if and (eq .Values.store "memory") (gt (int (include "tokengate.maxReplicas" .)) 1) (not .Values.perReplicaLimits) }}
{{- fail (printf "\n\nstore: memory with %s: every pod would keep its own buckets, so clients\nwould get up to %s times every limit of the policy.\nEither use `store: redis` for one quota shared by all pods, or set\n`perReplicaLimits: true` to accept limits that apply to each pod separately." (ternary (printf "autoscaling up to %d pods" (int .Values.autoscaling.maxReplicas)) (printf "replicaCount %d" (int .Values.replicaCount)) .Values.autoscaling.enabled) (include "tokengate.maxReplicas" .)) }}
{{- end }}
{{- if and (eq .Values.store "redis") (not .Values.redis.addr) (not .Values.redis.url) }}
{{- fail "store: redis needs redis.addr or redis.url" }}
{{- end }}
{{- if and .Values.redis.cluster .Values.redis.sentinelMaster }}
{{- fail "redis.cluster and redis.sentinelMaster exclude each other" }}
{{- end }}
{{- if not (has .Values.redis.password.as (list "file" "env")) }}
{{- fail (printf "redis.password.as %q: want file or env" .Values.redis.password.as) }}
{{- end }}
{{- if and .Values.grpcTLS.requireClientCert (not .Values.grpcTLS.clientCAKey) }}
{{- fail "grpcTLS.requireClientCert needs grpcTLS.clientCAKey: the CA that signs the clients' certificates" }}
{{- end }}
{{- if and (or .Values.grpcTLS.clientCAKey .Values.grpcTLS.requireClientCert) (not .Values.grpcTLS.existingSecret) }}
{{- fail "grpcTLS.clientCAKey and grpcTLS.requireClientCert need grpcTLS.existingSecret" }}
{{- end }}
{{- if and .Values.autoscaling.enabled (gt (int .Values.autoscaling.minReplicas) (int .Values.autoscaling.maxReplicas)) }}
{{- fail "autoscaling.minReplicas is above autoscaling.maxReplicas" }}
{{- end }}
{{- if and (include "tokengate.policyText" .) (not .Values.policy.existingConfigMap) }}
{{- include "tokengate.validatePolicy" (dict "name" "policy.content" "content" (include "tokengate.policyText" .)) }}
{{- end }}
{{- if or .Values.policy.candidate.enabled .Values.policy.candidate.content }}
{{- if not (include "tokengate.policyConfigMap" .) }}
{{- fail "policy.candidate: the candidate is a key of the policy ConfigMap; set policy.content or policy.existingConfigMap" }}
{{- end }}
{{- if eq .Values.policy.candidate.key .Values.policy.key }}
{{- fail (printf "policy.candidate.key %q is the live policy's key" .Values.policy.key) }}
{{- end }}
{{- if and .Values.policy.candidate.content .Values.policy.existingConfigMap }}
{{- fail "policy.candidate.content: the chart makes no ConfigMap beside policy.existingConfigMap; put the candidate in that ConfigMap and set policy.candidate.enabled" }}
{{- end }}
{{- end }}
{{- if .Values.policy.candidate.content }}
{{- include "tokengate.validatePolicy" (dict "name" "policy.candidate.content" "content" (include "tokengate.yamlText" .Values.policy.candidate.content)) }}
{{- end }}
{{- if not .Values.image.repository }}
{{- fail "\n\nimage.repository is not set, and no tokengate image is published: build one from\nthe repository's Dockerfile and give the chart its name. With kind:\n  docker build -t tokengate:dev .\n  kind load docker-image tokengate:dev\n  helm install tokengate charts/tokengate --set image.repository=tokengate --set image.tag=dev\nelse push it to a registry your cluster pulls from and set image.repository\nand image.tag (the chart's README, \"The image\")." }}
{{- end }}
{{- end }}

{{/* tokengate.candidate: "true" when a candidate policy is mounted and served in shadow. */}}
{{- define "tokengate.candidate" -}}
{{- if and (include "tokengate.policyConfigMap" .) (or .Values.policy.candidate.enabled .Values.policy.candidate.content) }}true{{ end }}
{{- end }}

{{/*
tokengate.validatePolicy fails the rendering of a policy's content (.content,
the value .name: policy.content or policy.candidate.content) that cannot be
a policy: not YAML, not a map, or a map with neither tokengate's
`domains:` (a map of domains to rules) nor an envoyproxy/ratelimit config's
`domain:`. The rules themselves are checked by `tokengate validate`, the
pod's init container, before the policy serves.
*/}}
{{- define "tokengate.validatePolicy" -}}
{{- $name := .name }}
{{- $p := fromYaml .content }}
{{- if hasKey $p "Error" }}
{{- fail (printf "%s is not a YAML map: %s" $name (index $p "Error")) }}
{{- end }}
{{- if hasKey $p "domains" }}
{{- if not (or (kindIs "map" $p.domains) (kindIs "invalid" $p.domains)) }}
{{- fail (printf "%s: domains must be a map of domain names to lists of rules, not %s" $name (kindOf $p.domains)) }}
{{- end }}
{{- range $domain, $rules := $p.domains }}
{{- if not (or (kindIs "slice" $rules) (kindIs "invalid" $rules)) }}
{{- fail (printf "%s: domain %q must be a list of rules, not %s" $name $domain (kindOf $rules)) }}
{{- end }}
{{- end }}
{{- else if not (and (hasKey $p "domain") (kindIs "string" $p.domain)) }}
{{- fail (printf "%s has neither `domains:` (a tokengate policy) nor `domain:` (an envoyproxy/ratelimit config); its keys: %s" $name (keys $p | sortAlpha | join ", ")) }}
{{- end }}
{{- end }}

{{/*
tokengate.probe renders a probe from values; a grpc probe without a port
gets ports.grpc (gRPC probes take a number, not a port name). With
grpcTLS a grpc probe becomes HTTP /readyz, which says the same: the
kubelet's gRPC probe speaks plaintext only.
Call with (dict "probe" .Values.readinessProbe "root" $).
*/}}
{{- define "tokengate.probe" -}}
{{- $probe := deepCopy .probe }}
{{- if and (hasKey $probe "grpc") .root.Values.grpcTLS.existingSecret }}
{{- $_ := unset $probe "grpc" }}
{{- $_ := set $probe "httpGet" (dict "path" "/readyz" "port" "http") }}
{{- end }}
{{- if hasKey $probe "grpc" }}
{{- $grpc := default (dict) $probe.grpc }}
{{- if not (hasKey $grpc "port") }}
{{- $_ := set $grpc "port" (int .root.Values.ports.grpc) }}
{{- end }}
{{- $_ := set $probe "grpc" $grpc }}
{{- end }}
{{- toYaml $probe }}
{{- end }}

{{/* tokengate.redisArgs: the --redis-* flags; empty values keep tokengate's defaults. */}}
{{- define "tokengate.redisArgs" -}}
{{- $r := .Values.redis }}
{{- with $r.addr }}
- {{ printf "--redis-addr=%v" . | quote }}
{{- end }}
{{- with $r.url }}
- {{ printf "--redis-url=%v" . | quote }}
{{- end }}
{{- with $r.db }}
- {{ printf "--redis-db=%d" (int64 .) | quote }}
{{- end }}
{{- with $r.sentinelMaster }}
- {{ printf "--redis-sentinel-master=%v" . | quote }}
{{- end }}
{{- if $r.cluster }}
- --redis-cluster
{{- end }}
{{- if and $r.password.existingSecret (eq $r.password.as "file") }}
- {{ printf "--redis-password-file=/etc/tokengate-redis/%s" $r.password.key | quote }}
{{- end }}
{{- with $r.timeout }}
- {{ printf "--redis-timeout=%v" . | quote }}
{{- end }}
{{- with $r.dialTimeout }}
- {{ printf "--redis-dial-timeout=%v" . | quote }}
{{- end }}
{{- with $r.poolSize }}
- {{ printf "--redis-pool-size=%d" (int64 .) | quote }}
{{- end }}
{{- with $r.keyPrefix }}
- {{ printf "--redis-key-prefix=%v" . | quote }}
{{- end }}
{{- if eq (toString $r.localShare) "auto" }}
- {{ printf "--redis-local-share=%v" (divf 1 (int (include "tokengate.maxReplicas" .))) | quote }}
{{- else }}
- {{ printf "--redis-local-share=%v" ($r.localShare) | quote }}
{{- end }}
{{- end }}

{{/*
tokengate.validateContainer: `tokengate validate` on the policy mounted at
/etc/tokengate, with tokengate's image, resources and security context:
the Deployment's init container and the policy-check Job's container.
*/}}
{{- define "tokengate.validateContainer" -}}
- name: validate-policy
  image: {{ include "tokengate.image" . | quote }}
  imagePullPolicy: {{ .Values.image.pullPolicy }}
  args:
    - validate
    - /etc/tokengate/policy.yaml
  {{- with .Values.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.securityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    - name: policy
      mountPath: /etc/tokengate
      readOnly: true
{{- end }}

{{/* tokengate.policyData: the data of a ConfigMap holding policy.content, and policy.candidate.content as a second key. */}}
{{- define "tokengate.policyData" -}}
{{- $data := dict .Values.policy.key (include "tokengate.policyText" .) }}
{{- if .Values.policy.candidate.content }}
{{- $_ := set $data .Values.policy.candidate.key (include "tokengate.yamlText" .Values.policy.candidate.content) }}
{{- end }}
{{- $data | toYaml }}
{{- end }}
