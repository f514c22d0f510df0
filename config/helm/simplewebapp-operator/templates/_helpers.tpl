{{/*
The prefix of every name: the release name (or fullnameOverride). With release
name "simplewebapp" the names equal those of config/default
(simplewebapp-controller-manager, simplewebapp-manager-role, ...).
*/}}
{{- define "swa.prefix" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "swa.serviceAccountName" -}}
{{ include "swa.prefix" . }}-controller-manager
{{- end -}}

{{/* Selects the operator's pods; fixed for the life of a release. */}}
{{- define "swa.selectorLabels" -}}
app.kubernetes.io/name: simplewebapp-operator
app.kubernetes.io/instance: {{ .Release.Name }}
control-plane: controller-manager
{{- end -}}

{{- define "swa.labels" -}}
{{ include "swa.selectorLabels" . }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "swa.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{/*
The volume source of the channels (--channels-dir): channels.volume, else a
configMap from channels.configMap; empty when neither is set.
*/}}
{{- define "swa.channelsVolume" -}}
{{- if and .Values.channels.volume .Values.channels.configMap -}}
{{- fail "set channels.configMap or channels.volume, not both" -}}
{{- end -}}
{{- with .Values.channels.volume -}}
{{ toYaml . }}
{{- else -}}
{{- with .Values.channels.configMap -}}
configMap:
  {{- toYaml . | nindent 2 }}
{{- end -}}
{{- end -}}
{{- end -}}
