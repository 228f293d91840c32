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
{{- include "kpress.checkAutoscaling" . -}}
{{- include "kpress.checkDisruptionBudget" . -}}
{{- end -}}

{{/* The HPA scales on CPU utilisation, a share of the container's CPU request: with no
     request there is nothing to measure against and the HPA never scales. */}}
{{- define "kpress.checkAutoscaling" -}}
{{- with .Values.autoscaling -}}
{{- if .enabled -}}
{{- if not (dig "requests" "cpu" "" ($.Values.resources | default dict)) -}}
{{- fail "autoscaling.enabled scales on CPU utilisation, a share of the CPU request: set resources.requests.cpu" -}}
{{- end -}}
{{- if lt (int .minReplicas) 1 -}}
{{- fail (printf "autoscaling.minReplicas must be at least 1, not %v" .minReplicas) -}}
{{- end -}}
{{- if lt (int .maxReplicas) (int .minReplicas) -}}
{{- fail (printf "autoscaling.maxReplicas (%v) must be at least autoscaling.minReplicas (%v)" .maxReplicas .minReplicas) -}}
{{- end -}}
{{- if lt (int .targetCPUUtilizationPercentage) 1 -}}
{{- fail (printf "autoscaling.targetCPUUtilizationPercentage must be at least 1, not %v" .targetCPUUtilizationPercentage) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The fewest replicas the Deployment runs: the HPA's floor, or replicaCount. */}}
{{- define "kpress.replicaFloor" -}}
{{- if .Values.autoscaling.enabled -}}
{{- int .Values.autoscaling.minReplicas -}}
{{- else -}}
{{- int .Values.replicaCount -}}
{{- end -}}
{{- end -}}

{{/* Whether the PodDisruptionBudget is rendered: asked for, and at least 2 replicas. */}}
{{- define "kpress.disruptionBudget" -}}
{{- if and .Values.podDisruptionBudget.enabled (ge (int (include "kpress.replicaFloor" .)) 2) -}}
true
{{- end -}}
{{- end -}}

{{/* How many pods a budget value (a number or "N%") counts at `replicas`, rounded up as
     Kubernetes rounds a PodDisruptionBudget's percentages. */}}
{{- define "kpress.budgetPods" -}}
{{- $value := index . 0 -}}
{{- $replicas := index . 1 -}}
{{- $name := index . 2 -}}
{{- if kindIs "string" $value -}}
{{- if not (regexMatch "^[0-9]+%$" $value) -}}
{{- fail (printf `%s must be a number or a percentage such as "50%%", not %q` $name $value) -}}
{{- end -}}
{{- ceil (divf (mulf $replicas (trimSuffix "%" $value | atoi)) 100) | int -}}
{{- else -}}
{{- int $value -}}
{{- end -}}
{{- end -}}

{{/* A budget must let a drain evict a pod when the Deployment runs its fewest
     replicas, or every node drain and cluster upgrade waits on kpress forever. */}}
{{- define "kpress.checkDisruptionBudget" -}}
{{- if include "kpress.disruptionBudget" . -}}
{{- $floor := int (include "kpress.replicaFloor" .) -}}
{{- with .Values.podDisruptionBudget -}}
{{- if not (kindIs "invalid" .minAvailable) -}}
{{- $pods := int (include "kpress.budgetPods" (list .minAvailable $floor "podDisruptionBudget.minAvailable")) -}}
{{- if ge $pods $floor -}}
{{- fail (printf "podDisruptionBudget.minAvailable %v keeps all of the %d replicas the Deployment may run: no drain could evict a kpress pod; set it lower, or use maxUnavailable" .minAvailable $floor) -}}
{{- end -}}
{{- else -}}
{{- if kindIs "invalid" .maxUnavailable -}}
{{- fail "podDisruptionBudget: set maxUnavailable or minAvailable" -}}
{{- end -}}
{{- $pods := int (include "kpress.budgetPods" (list .maxUnavailable $floor "podDisruptionBudget.maxUnavailable")) -}}
{{- if lt $pods 1 -}}
{{- fail (printf "podDisruptionBudget.maxUnavailable %v lets no pod be evicted: no drain could evict a kpress pod; set it to 1 or more" .maxUnavailable) -}}
{{- end -}}
{{- end -}}
{{- end -}}
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
