{{/* Names, labels and the pieces of broker configuration that several templates share. */}}

{{- define "runnel.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name; also the StatefulSet's, so pods are <fullname>-<ordinal>. */}}
{{- define "runnel.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "runnel.headless" -}}
{{- printf "%s-headless" (include "runnel.fullname" .) -}}
{{- end -}}

{{/* The DNS suffix of every broker pod: <pod>.<this>. */}}
{{- define "runnel.podDomain" -}}
{{- printf "%s.%s.svc.%s" (include "runnel.headless" .) .Release.Namespace .Values.clusterDomain -}}
{{- end -}}

{{- define "runnel.selectorLabels" -}}
app.kubernetes.io/name: {{ include "runnel.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "runnel.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "runnel.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: runnel
{{- end -}}

{{- define "runnel.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "runnel.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "runnel.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The Kafka listener's name: SSL with TLS, else PLAINTEXT. */}}
{{- define "runnel.listenerName" -}}
{{- if .Values.tls.enabled -}}SSL{{- else -}}PLAINTEXT{{- end -}}
{{- end -}}

{{/* How many of the first pods are metadata voters. */}}
{{- define "runnel.voterCount" -}}
{{- min (int .Values.controllerVoters) (int .Values.replicas) -}}
{{- end -}}

{{/* controller.quorum.voters: id@<pod>.<headless domain>:<controller port> for the first pods. */}}
{{- define "runnel.quorumVoters" -}}
{{- $voters := list -}}
{{- range $i := until (int (include "runnel.voterCount" .)) -}}
{{- $voters = append $voters (printf "%d@%s-%d.%s:%d" $i (include "runnel.fullname" $) $i (include "runnel.podDomain" $) (int $.Values.ports.controller)) -}}
{{- end -}}
{{- join "," $voters -}}
{{- end -}}

{{/* A setting's value as server.properties wants it: whole numbers without an exponent. */}}
{{- define "runnel.settingValue" -}}
{{- $v := . -}}
{{- if and (kindIs "float64" $v) (eq (floor $v) $v) -}}
{{- int64 $v -}}
{{- else -}}
{{- $v -}}
{{- end -}}
{{- end -}}

{{/* controlled.shutdown.timeout.ms in force (the broker's default when not set). */}}
{{- define "runnel.shutdownTimeoutMs" -}}
{{- $v := index .Values.config "controlled.shutdown.timeout.ms" -}}
{{- if kindIs "invalid" $v -}}30000{{- else -}}{{- int64 $v -}}{{- end -}}
{{- end -}}

{{/* Settings the chart writes itself: refused in .Values.config. */}}
{{- define "runnel.managedSettings" -}}
node.id listeners advertised.listeners listener.security.protocol.map controller.listener.names controller.quorum.voters log.dirs admin.listeners broker.location ssl.keystore.type ssl.keystore.location ssl.truststore.type ssl.truststore.location ssl.client.auth
{{- end -}}

{{/* Stops rendering with a message when the values cannot make a working cluster. */}}
{{- define "runnel.validate" -}}
{{- $timeoutMs := int64 (include "runnel.shutdownTimeoutMs" .) -}}
{{- $graceMs := mul (int64 .Values.terminationGracePeriodSeconds) 1000 -}}
{{- if le $graceMs $timeoutMs -}}
{{- fail (printf "terminationGracePeriodSeconds (%d s) must exceed controlled.shutdown.timeout.ms (%d ms): Kubernetes kills the broker at the end of the grace period, in the middle of its controlled shutdown" (int64 .Values.terminationGracePeriodSeconds) $timeoutMs) -}}
{{- end -}}
{{- if not (has (int .Values.controllerVoters) (list 3 5)) -}}
{{- fail (printf "controllerVoters must be 3 or 5, not %v" .Values.controllerVoters) -}}
{{- end -}}
{{- if lt (int .Values.replicas) 1 -}}
{{- fail "replicas must be at least 1" -}}
{{- end -}}
{{- if and .Values.tls.enabled (not .Values.tls.secretName) -}}
{{- fail "tls.enabled needs tls.secretName: a Secret with the broker certificate, its key and the CA" -}}
{{- end -}}
{{- if not (has .Values.tls.clientAuth (list "none" "requested" "required")) -}}
{{- fail (printf "tls.clientAuth must be none, requested or required, not %v" .Values.tls.clientAuth) -}}
{{- end -}}
{{- if not (has .Values.podAntiAffinity (list "hard" "soft" "none")) -}}
{{- fail (printf "podAntiAffinity must be hard, soft or none, not %v" .Values.podAntiAffinity) -}}
{{- end -}}
{{- $managed := splitList " " (include "runnel.managedSettings" .) -}}
{{- range $k, $_ := .Values.config -}}
{{- if has $k $managed -}}
{{- fail (printf "config.%s is set by the chart itself (see values.yaml): remove it from config" $k) -}}
{{- end -}}
{{- end -}}
{{- end -}}
