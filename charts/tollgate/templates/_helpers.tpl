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
max_message_timeout, so there the one messageTimeout carries the budget.
*/}}
{{- define "tollgate.messageTimeout" -}}
{{- if eq .Values.integration "envoyGateway" }}{{ .Values.envoyGateway.messageTimeout }}{{ else }}{{ .Values.envoy.messageTimeout }}{{ end }}
{{- end }}
{{- define "tollgate.maxMessageTimeout" -}}
{{- if ne .Values.integration "envoyGateway" }}{{ .Values.envoy.maxMessageTimeout }}{{ end }}
{{- end }}

{{/* The pod's grace period: larger than drain delay plus shutdown timeout. */}}
{{- define "tollgate.gracePeriod" -}}
{{- $need := add .Values.shutdown.drainDelaySeconds .Values.shutdown.timeoutSeconds }}
{{- if kindIs "invalid" .Values.terminationGracePeriodSeconds }}
{{- add $need 10 }}
{{- else if le (int .Values.terminationGracePeriodSeconds) (int $need) }}
{{- fail (printf "terminationGracePeriodSeconds (%v) must exceed shutdown.drainDelaySeconds + shutdown.timeoutSeconds (%v), or in-flight requests are killed" .Values.terminationGracePeriodSeconds $need) }}
{{- else }}
{{- .Values.terminationGracePeriodSeconds }}
{{- end }}
{{- end }}
