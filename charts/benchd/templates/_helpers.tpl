{{/* The chart's name, and the release's full name (63 characters: a DNS label). */}}
{{- define "benchd.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "benchd.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "benchd.selectorLabels" -}}
app.kubernetes.io/name: {{ include "benchd.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "benchd.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "benchd.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "benchd.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "benchd.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The chart's own Secret holds what no existing Secret provides: the API token, the database URL. */}}
{{- define "benchd.ownSecret" -}}
{{- if or (not .Values.apiToken.existingSecret) .Values.database.url -}}true{{- end -}}
{{- end -}}

{{/* The API token: the value given, else the one a previous install stored, else a new one. */}}
{{- define "benchd.apiToken" -}}
{{- $stored := lookup "v1" "Secret" .Release.Namespace (include "benchd.fullname" .) -}}
{{- if .Values.apiToken.value -}}
{{- .Values.apiToken.value -}}
{{- else if and $stored $stored.data (index $stored.data "api-token") -}}
{{- index $stored.data "api-token" | b64dec -}}
{{- else -}}
{{- randAlphaNum 40 -}}
{{- end -}}
{{- end -}}

{{/* Where benchd writes: the state volume's mount. */}}
{{- define "benchd.stateDir" -}}/var/lib/benchd{{- end -}}

{{/* What the values cannot mean together. */}}
{{- define "benchd.validate" -}}
{{- if and .Values.database.url .Values.database.existingSecret -}}
{{- fail "database: set url or existingSecret, not both" -}}
{{- end -}}
{{- if and .Values.serviceMonitor.enabled .Values.podMonitor.enabled -}}
{{- fail "serviceMonitor.enabled and podMonitor.enabled: choose one, or every series is scraped twice" -}}
{{- end -}}
{{- if eq (int .Values.benchd.port) (int .Values.benchd.probePort) -}}
{{- fail (printf "benchd.probePort: a port of its own for /metrics and the probes, not benchd.port's (%d)" (int .Values.benchd.port)) -}}
{{- end -}}
{{- if and .Values.gpu.enabled (lt (int .Values.gpu.count) 0) -}}
{{- fail "gpu.count: 0 (every GPU of the node, none reserved) or the number of GPUs to request" -}}
{{- end -}}
{{- end -}}

{{/* A dashboard's JSON with the datasource uids of this Grafana. */}}
{{- define "benchd.dashboard" -}}
{{- $json := .json -}}
{{- range $kind, $uid := dict "prometheus" .datasources.prometheus "benchd-postgres" .datasources.postgres "tempo" .datasources.tempo -}}
{{- $json = $json | replace (printf "\"uid\": %q" $kind) (printf "\"uid\": %q" $uid) | replace (printf "\"datasourceUid\": %q" $kind) (printf "\"datasourceUid\": %q" $uid) -}}
{{- end -}}
{{- $json -}}
{{- end -}}
