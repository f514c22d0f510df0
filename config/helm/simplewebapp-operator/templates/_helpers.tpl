{{/*
The prefix of every name: the release name (or fullnameOverride). With release
name "simplewebapp" the names equal those of config/default
(simplewebapp-controller-manager, simplewebapp-manager-role, ...).
*/}}
{{- define "swa.prefix" -}}
{{- default .Release.Name .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/*
The operator's ServiceAccount, named in the Deployment and every binding of
its roles. With serviceAccount.create=false the chart creates none and uses
serviceAccount.name, which must then exist in the release namespace: no
fallback name, since a made-up one would bind the roles to nobody.
*/}}
{{- define "swa.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{ .Values.serviceAccount.name | default (printf "%s-controller-manager" (include "swa.prefix" .)) }}
{{- else -}}
{{ required "serviceAccount.name is required when serviceAccount.create is false: the name of an existing ServiceAccount in the release namespace" .Values.serviceAccount.name }}
{{- end -}}
{{- end -}}

{{/*
Selects the operator's pods (Deployment selector, metrics Service,
ServiceMonitor). A Deployment's selector is immutable, so nothing that changes
between upgrades (version, chart) may be added here.
*/}}
{{- define "swa.selectorLabels" -}}
app.kubernetes.io/name: simplewebapp-operator
app.kubernetes.io/instance: {{ .Release.Name }}
control-plane: controller-manager
{{- end -}}

{{/*
The recommended labels that are not selectors: version is the operator
version (appVersion), chart the chart that rendered the object. Label values
allow no "+" and at most 63 characters.
*/}}
{{- define "swa.standardLabels" -}}
app.kubernetes.io/version: {{ .Chart.AppVersion | replace "+" "_" | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end -}}

{{/* The labels of every object the chart renders; the helm test Pod names itself apart (tests/test-operator.yaml). */}}
{{- define "swa.labels" -}}
{{ include "swa.selectorLabels" . }}
{{ include "swa.standardLabels" . }}
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

{{/*
The Secret the metrics endpoint serves its certificate from: metrics.tls.secretName,
else the one cert-manager issues; empty when neither (a self-signed
certificate generated at start).
*/}}
{{- define "swa.metricsCertSecret" -}}
{{- if and .Values.metrics.enabled .Values.metrics.secure -}}
{{- with .Values.metrics.tls.secretName -}}
{{ . }}
{{- else -}}
{{- if .Values.metrics.tls.certManager.enabled -}}
{{ include "swa.prefix" . }}-metrics-server-cert
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The metrics Service's DNS name, which the serving certificate names. */}}
{{- define "swa.metricsServiceDNS" -}}
{{ include "swa.prefix" . }}-controller-manager-metrics-service.{{ .Release.Namespace }}.svc
{{- end -}}
