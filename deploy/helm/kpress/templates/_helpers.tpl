{{- define "kpress.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "kpress.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "kpress.labels" -}}
{{ include "kpress.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "kpress.checkValues" -}}
{{- if not (has .Values.mode (list "ports" "sni")) -}}
{{- fail (printf "mode must be \"ports\" or \"sni\", not %q" .Values.mode) -}}
{{- end -}}
{{- if and (eq .Values.mode "sni") (not .Values.tls.secretName) -}}
{{- fail "mode \"sni\" tells nodes apart by the TLS server name: set tls.secretName" -}}
{{- end -}}
{{- if and .Values.tls.clientCaSecretName (not .Values.tls.secretName) -}}
{{- fail "tls.clientCaSecretName (mTLS) needs tls.secretName" -}}
{{- end -}}
{{- if not .Values.brokers -}}
{{- fail "brokers: name at least one broker" -}}
{{- end -}}
{{- end -}}

{{/* The policy file: .Values.policy as given, or one generated from the values.
     Strings are written with toJson: a JSON string is a TOML basic string. */}}
{{- define "kpress.policy" -}}
{{- if .Values.policy -}}
{{ .Values.policy }}
{{- else -}}
[listener]
bind = {{ printf "0.0.0.0:%d" (int .Values.listener.port) | toJson }}
{{- if eq .Values.mode "sni" }}
mode = "sni"
advertised_host_pattern = {{ .Values.listener.advertisedHostPattern | toJson }}
bootstrap_host = {{ .Values.listener.bootstrapHost | toJson }}
{{- with .Values.listener.advertisedPort }}
advertised_port = {{ int . }}
{{- end }}
{{- else }}
advertised_host = {{ .Values.listener.advertisedHost | default (printf "%s.%s.svc" (include "kpress.fullname" .) .Release.Namespace) | toJson }}
node_port_base = {{ int .Values.listener.nodePortBase }}
{{- end }}
{{- if .Values.tls.secretName }}

[listener.tls]
cert = "tls/tls.crt"
key = "tls/tls.key"
{{- if .Values.tls.clientCaSecretName }}
client_ca = "client-ca/ca.crt"
client_auth = "required"
{{- end }}
{{- end }}

[upstream]
bootstrap_servers = {{ .Values.brokers | toJson }}
{{- if .Values.upstreamTls.secretName }}

[upstream.tls]
ca = "upstream-tls/ca.crt"
{{- if .Values.upstreamTls.clientCertificate }}
cert = "upstream-tls/tls.crt"
key = "upstream-tls/tls.key"
{{- end }}
{{- with .Values.upstreamTls.serverName }}
server_name = {{ . | toJson }}
{{- end }}
{{- end }}

[admin]
bind = {{ printf "0.0.0.0:%d" (int .Values.admin.port) | toJson }}
readiness_window_secs = {{ int .Values.admin.readinessWindowSecs }}

{{ .Values.rules }}
{{- end -}}
{{- end -}}
