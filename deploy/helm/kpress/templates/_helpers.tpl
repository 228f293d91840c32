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
{{- include "kpress.checkCredentials" . -}}
{{- end -}}

{{/* The ServiceAccount the pods run as. */}}
{{- define "kpress.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- .Values.serviceAccount.name | default (include "kpress.fullname" .) -}}
{{- else -}}
{{- .Values.serviceAccount.name | default "default" -}}
{{- end -}}
{{- end -}}

{{/* Whether the policy has [upstream.tls]. */}}
{{- define "kpress.upstreamTls" -}}
{{- with .Values.upstreamTls -}}
{{- if or .enabled .secretName .clientCertificate -}}
true
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The Secret a reference of upstreamSasl names ("" for none). */}}
{{- define "kpress.saslRef" -}}
{{- dig (index . 1) "name" "" (index . 0).Values.upstreamSasl -}}
{{- end -}}

{{/* Every Secret key the pods mount, as a JSON list of {secret, key, path}: path is
     under /etc/kpress, where the generated policy names the file. The policy's paths
     do not depend on the Secrets' key names. */}}
{{- define "kpress.secretFiles" -}}
{{- $files := list -}}
{{- with .Values.tls.secretName -}}
{{- $files = append $files (dict "secret" . "key" "tls.crt" "path" "tls/tls.crt") -}}
{{- $files = append $files (dict "secret" . "key" "tls.key" "path" "tls/tls.key") -}}
{{- end -}}
{{- with .Values.tls.clientCaSecretName -}}
{{- $files = append $files (dict "secret" . "key" $.Values.tls.clientCaKey "path" "client-ca/ca.crt") -}}
{{- end -}}
{{- with .Values.upstreamTls -}}
{{- if .secretName -}}
{{- $files = append $files (dict "secret" .secretName "key" .caKey "path" "upstream-tls/ca.crt") -}}
{{- end -}}
{{- if .clientCertificate -}}
{{- $secret := .clientCertificateSecretName | default .secretName -}}
{{- $files = append $files (dict "secret" $secret "key" .certKey "path" "upstream-tls/tls.crt") -}}
{{- $files = append $files (dict "secret" $secret "key" .keyKey "path" "upstream-tls/tls.key") -}}
{{- end -}}
{{- end -}}
{{- range $ref, $path := dict "passwordRef" "upstream-sasl/password" "clientSecretRef" "upstream-sasl/client-secret" "tokenRef" "upstream-sasl/token" "tokenEndpointCaRef" "token-endpoint-ca/ca.crt" -}}
{{- with include "kpress.saslRef" (list $ $ref) -}}
{{- $files = append $files (dict "secret" . "key" (dig $ref "key" "" $.Values.upstreamSasl) "path" $path) -}}
{{- end -}}
{{- end -}}
{{- toJson $files -}}
{{- end -}}

{{/* The projected volume's Secret sources: kpress.secretFiles grouped by Secret, in the
     order each Secret first appears, as a JSON list of {name, items: [{key, path}]}. */}}
{{- define "kpress.secretSources" -}}
{{- $sources := list -}}
{{- $items := dict -}}
{{- range include "kpress.secretFiles" . | fromJsonArray -}}
{{- if not (regexMatch "^[-._a-zA-Z0-9]+$" .key) -}}
{{- fail (printf "%q is not a Secret key (letters, digits, '-', '_', '.'): it cannot hold %s" .key .path) -}}
{{- end -}}
{{- if not (hasKey $items .secret) -}}
{{- $sources = append $sources .secret -}}
{{- $_ := set $items .secret list -}}
{{- end -}}
{{- $_ := set $items .secret (append (get $items .secret) (dict "key" .key "path" .path)) -}}
{{- end -}}
{{- $out := list -}}
{{- range $sources -}}
{{- $out = append $out (dict "name" . "items" (get $items .)) -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/* The container's environment: SSL_CERT_FILE for the token endpoint's CA, then env. */}}
{{- define "kpress.env" -}}
{{- $env := list -}}
{{- if include "kpress.saslRef" (list . "tokenEndpointCaRef") -}}
{{- $env = append $env (dict "name" "SSL_CERT_FILE" "value" "/etc/kpress/token-endpoint-ca/ca.crt") -}}
{{- end -}}
{{- toJson (concat $env (.Values.env | default list)) -}}
{{- end -}}

{{/* An environment variable a *Env value names must be set: by env, or possibly by
     envFrom (which the chart cannot see into). */}}
{{- define "kpress.checkEnvSet" -}}
{{- $root := index . 0 -}}
{{- $value := index . 1 -}}
{{- $name := dig $value "" $root.Values.upstreamSasl -}}
{{- if and $name (not $root.Values.envFrom) -}}
{{- $set := list -}}
{{- range $root.Values.env -}}
{{- $set = append $set .name -}}
{{- end -}}
{{- if not (has $name $set) -}}
{{- fail (printf "upstreamSasl.%s names %s, which no entry of env sets (add it to env, e.g. from a Secret with valueFrom.secretKeyRef, or use envFrom)" $value $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* kpress's login and the files it reads: what kpress's check-config would refuse,
     said in the values' names, and mounts that would hide the chart's. */}}
{{- define "kpress.checkCredentials" -}}
{{- $s := .Values.upstreamSasl -}}
{{- $mechanism := $s.mechanism | default "" -}}
{{- range $ref := list "passwordRef" "clientSecretRef" "tokenRef" "tokenEndpointCaRef" -}}
{{- if and (include "kpress.saslRef" (list $ $ref)) (not (dig $ref "key" "" $s)) -}}
{{- fail (printf "upstreamSasl.%s.key: name the key of Secret %s that holds the file" $ref (include "kpress.saslRef" (list $ $ref))) -}}
{{- end -}}
{{- end -}}
{{- if not (has $mechanism (list "" "PLAIN" "SCRAM-SHA-256" "SCRAM-SHA-512" "OAUTHBEARER")) -}}
{{- fail (printf "upstreamSasl.mechanism must be \"PLAIN\", \"SCRAM-SHA-256\", \"SCRAM-SHA-512\" or \"OAUTHBEARER\", not %q" $mechanism) -}}
{{- end -}}
{{- $password := list "username" "passwordRef" "passwordEnv" -}}
{{- $bearer := list "tokenEndpointUrl" "clientId" "clientSecretRef" "clientSecretEnv" "scope" "tokenEndpointCaRef" "tokenRef" "tokenFile" "tokenProvider" "region" -}}
{{- $given := list -}}
{{- range $key := concat $password $bearer -}}
{{- $value := get $s $key -}}
{{- if kindIs "map" $value -}}
{{- $value = dig "name" "" $value -}}
{{- end -}}
{{- if $value -}}
{{- $given = append $given $key -}}
{{- end -}}
{{- end -}}
{{- if not .Values.policy -}}
{{- if eq $mechanism "" -}}
{{- with $given -}}
{{- fail (printf "upstreamSasl.%s: set upstreamSasl.mechanism too (kpress's login to the brokers)" (first .)) -}}
{{- end -}}
{{- else if eq $mechanism "OAUTHBEARER" -}}
{{- range $key := $password -}}
{{- if has $key $given -}}
{{- fail (printf "upstreamSasl.%s is for PLAIN and SCRAM, not OAUTHBEARER" $key) -}}
{{- end -}}
{{- end -}}
{{- $sources := list -}}
{{- range $key := list "tokenEndpointUrl" "tokenRef" "tokenFile" "tokenProvider" -}}
{{- if has $key $given -}}
{{- $sources = append $sources $key -}}
{{- end -}}
{{- end -}}
{{- if not $sources -}}
{{- fail "upstreamSasl.mechanism OAUTHBEARER takes its tokens from a token endpoint (tokenEndpointUrl), a file (tokenRef or tokenFile) or a provider (tokenProvider): set one" -}}
{{- end -}}
{{- if gt (len $sources) 1 -}}
{{- fail (printf "upstreamSasl: set only one token source, not %s" (join " and " $sources)) -}}
{{- end -}}
{{- $source := first $sources -}}
{{- range $key := list "clientId" "clientSecretRef" "clientSecretEnv" "scope" "tokenEndpointCaRef" -}}
{{- if and (has $key $given) (ne $source "tokenEndpointUrl") -}}
{{- fail (printf "upstreamSasl.%s is only for a token endpoint (tokenEndpointUrl), not %s" $key $source) -}}
{{- end -}}
{{- end -}}
{{- if and (has "region" $given) (ne $source "tokenProvider") -}}
{{- fail (printf "upstreamSasl.region is only for tokenProvider, not %s" $source) -}}
{{- end -}}
{{- if eq $source "tokenEndpointUrl" -}}
{{- if not (regexMatch "^https?://[^/?#@[:space:]]+" $s.tokenEndpointUrl) -}}
{{- fail (printf "upstreamSasl.tokenEndpointUrl must be an http(s) URL with a host, not %q" $s.tokenEndpointUrl) -}}
{{- end -}}
{{- if not $s.clientId -}}
{{- fail "upstreamSasl.tokenEndpointUrl needs upstreamSasl.clientId" -}}
{{- end -}}
{{- if and (has "clientSecretRef" $given) (has "clientSecretEnv" $given) -}}
{{- fail "upstreamSasl: set only one of clientSecretRef and clientSecretEnv" -}}
{{- end -}}
{{- if not (or (has "clientSecretRef" $given) (has "clientSecretEnv" $given)) -}}
{{- fail "upstreamSasl.tokenEndpointUrl needs the client secret: clientSecretRef (a Secret's key) or clientSecretEnv" -}}
{{- end -}}
{{- include "kpress.checkEnvSet" (list . "clientSecretEnv") -}}
{{- else if eq $source "tokenProvider" -}}
{{- if ne $s.tokenProvider "aws_msk_iam" -}}
{{- fail (printf "upstreamSasl.tokenProvider must be \"aws_msk_iam\", not %q" $s.tokenProvider) -}}
{{- end -}}
{{- if not $s.region -}}
{{- fail "upstreamSasl.tokenProvider aws_msk_iam needs upstreamSasl.region (e.g. us-east-1)" -}}
{{- end -}}
{{- if not (include "kpress.upstreamTls" .) -}}
{{- fail "upstreamSasl.tokenProvider aws_msk_iam: MSK's IAM listeners take TLS only (port 9098): set upstreamTls.enabled" -}}
{{- end -}}
{{- else if eq $source "tokenFile" -}}
{{- if not (isAbs $s.tokenFile) -}}
{{- fail (printf "upstreamSasl.tokenFile must be an absolute path in a volume of extraVolumes, not %q" $s.tokenFile) -}}
{{- end -}}
{{- end -}}
{{- else -}}
{{- range $key := $bearer -}}
{{- if has $key $given -}}
{{- fail (printf "upstreamSasl.%s is for OAUTHBEARER, not %s" $key $mechanism) -}}
{{- end -}}
{{- end -}}
{{- if not $s.username -}}
{{- fail (printf "upstreamSasl.mechanism %s needs upstreamSasl.username" $mechanism) -}}
{{- end -}}
{{- if and (has "passwordRef" $given) (has "passwordEnv" $given) -}}
{{- fail "upstreamSasl: set only one of passwordRef and passwordEnv" -}}
{{- end -}}
{{- if not (or (has "passwordRef" $given) (has "passwordEnv" $given)) -}}
{{- fail (printf "upstreamSasl.mechanism %s needs the password: passwordRef (a Secret's key) or passwordEnv" $mechanism) -}}
{{- end -}}
{{- include "kpress.checkEnvSet" (list . "passwordEnv") -}}
{{- end -}}
{{- end -}}
{{- with .Values.upstreamTls -}}
{{- if and .clientCertificate (not (or .secretName .clientCertificateSecretName)) -}}
{{- fail "upstreamTls.clientCertificate: name the Secret holding it (clientCertificateSecretName, or secretName)" -}}
{{- end -}}
{{- end -}}
{{- if and .Values.serviceAccount.annotations (not .Values.serviceAccount.create) -}}
{{- fail "serviceAccount.annotations apply to a ServiceAccount the chart creates (serviceAccount.create): annotate your own ServiceAccount yourself" -}}
{{- end -}}
{{- range .Values.extraVolumeMounts -}}
{{- if or (eq (clean .mountPath) "/etc/kpress") (hasPrefix "/etc/kpress/" (clean .mountPath)) -}}
{{- fail (printf "extraVolumeMounts: %s is under /etc/kpress, the chart's policy directory: mount elsewhere" .mountPath) -}}
{{- end -}}
{{- end -}}
{{- if include "kpress.saslRef" (list . "tokenEndpointCaRef") -}}
{{- range .Values.env -}}
{{- if eq .name "SSL_CERT_FILE" -}}
{{- fail "env sets SSL_CERT_FILE, which upstreamSasl.tokenEndpointCaRef sets: keep one" -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A checksum of the policy's sections kpress fixes at start ([listener], [upstream],
     [limits], [admin]), for the pod template: a change there rolls the pods, while the
     sections a reload applies ([defaults], [[topics]], [log], [shadow], [overload],
     [consumers], [[clients]]) change nothing in it. A policy Helm cannot read as TOML is summed whole. */}}
{{- define "kpress.restartChecksum" -}}
{{- $policy := include "kpress.policy" . -}}
{{- $document := fromToml $policy -}}
{{- if hasKey $document "Error" -}}
{{- sha256sum $policy -}}
{{- else -}}
{{- omit $document "defaults" "topics" "log" "shadow" "overload" "consumers" "clients" | toJson | sha256sum -}}
{{- end -}}
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
{{- if include "kpress.upstreamTls" . }}

[upstream.tls]
{{- if .Values.upstreamTls.secretName }}
ca = "upstream-tls/ca.crt"
{{- end }}
{{- if .Values.upstreamTls.clientCertificate }}
cert = "upstream-tls/tls.crt"
key = "upstream-tls/tls.key"
{{- end }}
{{- with .Values.upstreamTls.serverName }}
server_name = {{ . | toJson }}
{{- end }}
{{- end }}
{{- with .Values.upstreamSasl }}
{{- if .mechanism }}

[upstream.sasl]
mechanism = {{ .mechanism | toJson }}
{{- if eq .mechanism "OAUTHBEARER" }}
{{- if .tokenEndpointUrl }}
token_endpoint_url = {{ .tokenEndpointUrl | toJson }}
client_id = {{ .clientId | toJson }}
{{- if dig "clientSecretRef" "name" "" . }}
client_secret_file = "upstream-sasl/client-secret"
{{- else }}
client_secret_env = {{ .clientSecretEnv | toJson }}
{{- end }}
{{- with .scope }}
scope = {{ . | toJson }}
{{- end }}
{{- else if .tokenProvider }}
token_provider = {{ .tokenProvider | toJson }}
region = {{ .region | toJson }}
{{- else if dig "tokenRef" "name" "" . }}
token_file = "upstream-sasl/token"
{{- else }}
token_file = {{ .tokenFile | toJson }}
{{- end }}
{{- else }}
username = {{ .username | toJson }}
{{- if dig "passwordRef" "name" "" . }}
password_file = "upstream-sasl/password"
{{- else }}
password_env = {{ .passwordEnv | toJson }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

[admin]
bind = {{ printf "0.0.0.0:%d" (int .Values.admin.port) | toJson }}
readiness_window_secs = {{ int .Values.admin.readinessWindowSecs }}

{{ .Values.rules }}
{{- end -}}
{{- end -}}
