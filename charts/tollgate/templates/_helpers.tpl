{{/* Chart name, truncated to the 63 characters a label value allows. */}}
{{- define "tollgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's objects. */}}
{{- define "tollgate.fullname" -}}
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

{{/* Labels every object carries. */}}
{{- define "tollgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "tollgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* Labels that select the pods. */}}
{{- define "tollgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tollgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tollgate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tollgate.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "tollgate.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Renders a file value given as YAML or as a string. */}}
{{- define "tollgate.fileContent" -}}
{{- if kindIs "string" . }}{{ . }}{{ else }}{{ toYaml . }}{{ end }}
{{- end }}

{{/* The Secret holding tenant keys, or "" when there are none. */}}
{{- define "tollgate.tenantSecret" -}}
{{- if .Values.tenants.existingSecret }}
{{- .Values.tenants.existingSecret }}
{{- else if .Values.tenants.apiKeys }}
{{- printf "%s-tenants" (include "tollgate.fullname" .) }}
{{- end }}
{{- end }}

{{/*
The Envoy message timers tollgate is told about. Envoy Gateway exposes no
max_message_timeout, so there overrides are off (--envoy-max-message-timeout=0s)
and the one messageTimeout carries the budget.
*/}}
{{- define "tollgate.messageTimeout" -}}
{{- if eq .Values.integration "envoyGateway" }}{{ .Values.envoyGateway.messageTimeout }}{{ else }}{{ .Values.envoy.messageTimeout }}{{ end }}
{{- end }}
{{- define "tollgate.maxMessageTimeout" -}}
{{- if eq .Values.integration "envoyGateway" }}0s{{ else }}{{ .Values.envoy.maxMessageTimeout }}{{ end }}
{{- end }}

{{/*
The pod's grace period: larger than the preStop sleep, the drain delay and
the shutdown timeout together (Kubernetes counts the preStop hook in it).
*/}}
{{- define "tollgate.gracePeriod" -}}
{{- $sd := .Values.shutdown }}
{{- $need := add (default 0 $sd.preStopSeconds) $sd.drainDelaySeconds $sd.timeoutSeconds }}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- add $need 10 }}
{{- else if le (int .Values.terminationGracePeriodSeconds) (int $need) }}
{{- fail (printf "terminationGracePeriodSeconds (%v) must exceed shutdown.preStopSeconds + shutdown.drainDelaySeconds + shutdown.timeoutSeconds (%v), or in-flight requests are killed" .Values.terminationGracePeriodSeconds $need) }}
{{- else }}
{{- .Values.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}

{{/*
"true" when leader election runs: leaderElection.enabled, or, left null, more
than one replica. The chart runs it in replica mode (--peer-addr): every pod
serves Envoy and the elected one schedules for all. Replicas with it
explicitly off fail the render: they would each schedule on their own.
*/}}
{{- define "tollgate.leaderElect" -}}
{{- $le := .Values.leaderElection }}
{{- $set := and (hasKey $le "enabled") (kindIs "bool" $le.enabled) }}
{{- $replicas := int .Values.replicaCount }}
{{- if and $set (not $le.enabled) (gt $replicas 1) }}
{{- fail (printf "replicaCount is %d but leaderElection.enabled is false: tollgate replicas cannot each schedule on their own (the SMG slot pool and the DRR state have a single owner); leave leaderElection.enabled unset or true, so that one elected replica schedules for all, or set replicaCount to 1" $replicas) }}
{{- else if or (and $set $le.enabled) (and (not $set) (gt $replicas 1)) }}true
{{- end }}
{{- end }}

{{/* The leader election Lease's name, or the etcd election's. */}}
{{- define "tollgate.leaseName" -}}
{{- default (include "tollgate.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}

{{/* "true" when leader election runs over a Kubernetes Lease. */}}
{{- define "tollgate.leaseElect" -}}
{{- if and (include "tollgate.leaderElect" .) (eq .Values.leaderElection.backend "kube") }}true{{ end }}
{{- end }}

{{/* "true" when the pods talk to the Kubernetes API. */}}
{{- define "tollgate.kubeAPI" -}}
{{- if or (ne .Values.discovery.mode "static") (include "tollgate.leaseElect" .) }}true{{ end }}
{{- end }}

{{/* Namespace of the workers tollgate discovers: the pods and what selects them. */}}
{{- define "tollgate.workerNamespace" -}}
{{- if eq .Values.discovery.mode "kubernetes" }}
{{- default .Release.Namespace .Values.discovery.kubernetes.namespace }}
{{- else }}
{{- .Release.Namespace }}
{{- end }}
{{- end }}

{{/*
The SMG rate-limit flags config.rateLimits sets, as a JSON list; a value
left at its default sets none (tollgate's default applies).
*/}}
{{- define "tollgate.rateLimitArgs" -}}
{{- $rl := .Values.config.rateLimits }}
{{- $args := list }}
{{- if ge (int $rl.maxConcurrentRequests) 0 }}
{{- $args = append $args (printf "--max-concurrent-requests=%d" (int $rl.maxConcurrentRequests)) }}
{{- end }}
{{- if gt (int64 $rl.tokensPerSecond) 0 }}
{{- $args = append $args (printf "--rate-limit-tokens-per-second=%d" (int64 $rl.tokensPerSecond)) }}
{{- end }}
{{- if include "tollgate.isSet" (list $rl "queueSize") }}
{{- $args = append $args (printf "--queue-size=%d" (int $rl.queueSize)) }}
{{- end }}
{{- if include "tollgate.isSet" (list $rl "queueTimeoutSecs") }}
{{- $args = append $args (printf "--queue-timeout-secs=%d" (int $rl.queueTimeoutSecs)) }}
{{- end }}
{{- if $rl.tenantRateLimits.enabled }}
{{- $args = append $args "--tenant-rate-limit-enabled" }}
{{- $args = append $args "--tenant-rate-limit-config=/etc/tollgate/config/tenant-rate-limits.yaml" }}
{{- end }}
{{- toJson $args }}
{{- end }}

{{/*
The prefill/decode flags config.pd sets, as a JSON list; a value left null
sets none (tollgate's default applies).
*/}}
{{- define "tollgate.pdArgs" -}}
{{- $args := list }}
{{- if include "tollgate.isSet" (list .Values.config.pd "uncachedThreshold") }}
{{- $args = append $args (printf "--pd-uncached-threshold=%d" (int64 .Values.config.pd.uncachedThreshold)) }}
{{- end }}
{{- toJson $args }}
{{- end }}

{{/* "true" when the map (first) has the key (second) set to something other than null. */}}
{{- define "tollgate.isSet" -}}
{{- $m := index . 0 }}
{{- $k := index . 1 }}
{{- if and (hasKey $m $k) (not (kindIs "invalid" (index $m $k))) }}true{{ end }}
{{- end }}

{{/*
Checks the combinations of values the schema cannot express; renders
nothing.
*/}}
{{- define "tollgate.validate" -}}
{{- $d := .Values.discovery }}
{{- if ne $d.mode "static" }}
{{- if .Values.config.workers }}
{{- fail (printf "config.workers lists workers but discovery.mode is %s, which finds them itself; empty config.workers or set discovery.mode: static" $d.mode) }}
{{- end }}
{{- end }}
{{- if eq $d.mode "kubernetes" }}
{{- if and $d.kubernetes.service $d.kubernetes.selector }}
{{- fail "discovery.kubernetes.service and discovery.kubernetes.selector are exclusive; set one" }}
{{- else if not (or $d.kubernetes.service $d.kubernetes.selector) }}
{{- fail "discovery.mode kubernetes needs discovery.kubernetes.service (a Service name) or discovery.kubernetes.selector (an EndpointSlice label selector)" }}
{{- end }}
{{- end }}
{{- if eq $d.mode "inferencepool" }}
{{- if not $d.inferencePool.name }}
{{- fail "discovery.mode inferencepool needs discovery.inferencePool.name, the InferencePool in the release namespace" }}
{{- end }}
{{- if ne .Values.integration "none" }}
{{- fail (printf "discovery.mode inferencepool needs integration: none, not %s: the gateway calls tollgate as the pool's endpoint picker, so a second ext_proc filter would admit every request twice" .Values.integration) }}
{{- end }}
{{- end }}
{{- $tenantLimits := .Values.config.rateLimits.tenantRateLimits }}
{{- if and $tenantLimits.enabled (not (get $tenantLimits "config")) }}
{{- fail "config.rateLimits.tenantRateLimits.enabled needs config.rateLimits.tenantRateLimits.config, the SMG tenant rate-limit file (default_policy and tenants): tollgate does not start with --tenant-rate-limit-enabled and no --tenant-rate-limit-config" }}
{{- end }}
{{- range $src := list (list "config.rateLimits" (include "tollgate.rateLimitArgs" .)) (list "config.pd" (include "tollgate.pdArgs" .)) }}
{{- $values := index $src 0 }}
{{- range index $src 1 | fromJsonArray }}
{{- $flag := regexReplaceAll "=.*$" (trimPrefix "--" .) "" }}
{{- range $.Values.extraArgs }}
{{- if regexMatch (printf "^--?%s(=|$)" $flag) (toString .) }}
{{- fail (printf "extraArgs has %q but %s already sets --%s; set it in one place (%s)" . $values $flag $values) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- with .Values.leaderElection }}
{{- if include "tollgate.leaderElect" $ }}
{{- $peer := int .peerPort }}
{{- if or (eq $peer (int $.Values.ports.grpc)) (eq $peer (int $.Values.ports.metrics)) }}
{{- fail (printf "leaderElection.peerPort (%d) must differ from ports.grpc and ports.metrics: the peer channel has a listener of its own" $peer) }}
{{- end }}
{{- if and (eq .backend "etcd") (not .etcdEndpoints) }}
{{- fail "leaderElection.backend etcd needs leaderElection.etcdEndpoints, the etcd client URLs (URL[,URL...])" }}
{{- end }}
{{- end }}
{{- if and (eq .backend "kube") .etcdEndpoints }}
{{- fail "leaderElection.etcdEndpoints is set but leaderElection.backend is kube; set backend: etcd to elect over etcd, or empty etcdEndpoints" }}
{{- end }}
{{- end }}
{{- end }}
