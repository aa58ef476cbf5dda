{{/* Names, labels and the pieces every workload shares. */}}

{{- define "reconciler-host.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name: the release name when it holds the chart's, else RELEASE-CHART. */}}
{{- define "reconciler-host.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "reconciler-host.serviceAccountName" -}}
{{- default (include "reconciler-host.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "reconciler-host.selectorLabels" -}}
app.kubernetes.io/name: {{ include "reconciler-host.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* part-of is the label `reconciler-host rbac` gives what it prints: the chart's RBAC carries it too. */}}
{{- define "reconciler-host.labels" -}}
{{ include "reconciler-host.selectorLabels" . }}
app.kubernetes.io/part-of: reconciler-host
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "reconciler-host.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag -}}
{{- if .Values.image.digest -}}
{{- printf "%s:%s@%s" .Values.image.repository $tag .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* Replicas of the Deployment: single runs one, whatever `replicas` says. */}}
{{- define "reconciler-host.replicas" -}}
{{- if eq .Values.mode "single" -}}1{{- else -}}{{ .Values.replicas }}{{- end -}}
{{- end -}}

{{/* The host's address as a Pod serves it: the node's loopback in the Linux variant. */}}
{{- define "reconciler-host.listen" -}}
{{- if .Values.linux.enabled -}}127.0.0.1:8080{{- else -}}0.0.0.0:8080{{- end -}}
{{- end -}}

{{/* The pod template of both workloads. */}}
{{- define "reconciler-host.podTemplate" -}}
metadata:
  labels:
    {{- include "reconciler-host.selectorLabels" . | nindent 4 }}
    {{- with .Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    # backends: change only with a restart (the host refuses them live): a change rolls the Pods.
    checksum/backends: {{ toJson (.Values.config.backends | default dict) | sha256sum }}
    {{- with .Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "reconciler-host.serviceAccountName" . }}
  {{- with .Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if .Values.linux.enabled }}
  hostNetwork: true                # bridges go into the node's own network namespace
  dnsPolicy: ClusterFirstWithHostNet
  {{- end }}
  {{- with .Values.priorityClassName }}
  priorityClassName: {{ . }}
  {{- end }}
  terminationGracePeriodSeconds: {{ .Values.terminationGracePeriodSeconds }}
  securityContext:
    {{- if not .Values.linux.enabled }}
    runAsNonRoot: true
    runAsUser: 65532
    runAsGroup: 65532
    {{- end }}
    seccompProfile: {type: RuntimeDefault}
  containers:
    - name: host
      image: {{ include "reconciler-host.image" . | quote }}
      imagePullPolicy: {{ .Values.image.pullPolicy }}
      args:
        - run
        - --config=/etc/reconciler-host/host.yaml
        - --guests=/var/lib/reconciler-host/guests
        - --cache-dir=/var/cache/reconciler-host/compiled
        - --listen={{ include "reconciler-host.listen" . }}
        {{- if eq .Values.mode "sharded" }}
        - --shards=auto
        - --shard-filter={{ .Values.sharding.filter }}
        {{- else if or (eq .Values.mode "leaderElected") .Values.linux.enabled }}
        - --leader-elect
        {{- end }}
        {{- if ne .Values.mode "single" }}
        - --lease-name={{ include "reconciler-host.fullname" . }}
        - --lease-namespace=$(POD_NAMESPACE)
        - --lease-duration={{ .Values.leaderElection.leaseDuration }}
        {{- end }}
        {{- with .Values.extraArgs }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      env:
        - name: POD_NAME                 # the replica's identity in the lease
          valueFrom: {fieldRef: {fieldPath: metadata.name}}
        - name: POD_NAMESPACE
          valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
        - name: RECONCILER_LOG_FORMAT
          value: {{ .Values.logFormat | quote }}
        - name: RUST_LOG
          value: {{ .Values.logLevel | quote }}
        {{- with .Values.apiServer.host }}
        - {name: KUBERNETES_SERVICE_HOST, value: {{ . | quote }}}
        {{- end }}
        {{- with .Values.apiServer.port }}
        - {name: KUBERNETES_SERVICE_PORT, value: {{ . | toString | quote }}}
        {{- end }}
        {{- with .Values.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- if not .Values.linux.enabled }}
      ports:
        - {name: http, containerPort: 8080}
      {{- end }}
      livenessProbe:
        {{- if .Values.linux.enabled }}
        httpGet: {host: 127.0.0.1, path: /healthz, port: 8080}
        {{- else }}
        httpGet: {path: /healthz, port: http}
        {{- end }}
        periodSeconds: 10
      readinessProbe:
        {{- if .Values.linux.enabled }}
        httpGet: {host: 127.0.0.1, path: /readyz, port: 8080}
        {{- else }}
        httpGet: {path: /readyz, port: http}
        {{- end }}
        periodSeconds: 2
      resources:
        {{- toYaml .Values.resources | nindent 8 }}
      securityContext:
        allowPrivilegeEscalation: false
        readOnlyRootFilesystem: true
        {{- if .Values.linux.enabled }}
        # netlink needs NET_ADMIN in the node's namespace, and it is granted to root only.
        runAsUser: 0
        capabilities: {drop: [ALL], add: [NET_ADMIN]}
        {{- else }}
        capabilities: {drop: [ALL]}
        {{- end }}
      volumeMounts:
        - {name: config, mountPath: /etc/reconciler-host, readOnly: true}
        - {name: guests, mountPath: /var/lib/reconciler-host/guests, readOnly: true}
        - {name: compile-cache, mountPath: /var/cache/reconciler-host}
        {{- range $i, $name := .Values.verifyKeys.secrets }}
        - {name: verify-secret-{{ $i }}, mountPath: /etc/reconciler-keys/{{ $name }}, readOnly: true}
        {{- end }}
        {{- range $i, $name := .Values.verifyKeys.configMaps }}
        - {name: verify-configmap-{{ $i }}, mountPath: /etc/reconciler-keys/{{ $name }}, readOnly: true}
        {{- end }}
  {{- with .Values.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .Values.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if .Values.affinity }}
  affinity:
    {{- toYaml .Values.affinity | nindent 4 }}
  {{- else if and (not .Values.linux.enabled) (ne .Values.mode "single") }}
  affinity:
    podAntiAffinity:
      preferredDuringSchedulingIgnoredDuringExecution:
        - weight: 100
          podAffinityTerm:
            topologyKey: kubernetes.io/hostname
            labelSelector:
              matchLabels:
                {{- include "reconciler-host.selectorLabels" . | nindent 18 }}
  {{- end }}
  volumes:
    - name: config
      configMap: {name: {{ include "reconciler-host.fullname" . }}-config}
    - name: guests
      projected:
        sources:
          - configMap: {name: {{ include "reconciler-host.fullname" . }}-guests}
          {{- range .Values.guests.configMaps }}
          - configMap: {name: {{ . }}}
          {{- end }}
    - name: compile-cache
      emptyDir: {sizeLimit: {{ .Values.compileCache.sizeLimit }}}
    {{- range $i, $name := .Values.verifyKeys.secrets }}
    - name: verify-secret-{{ $i }}
      secret: {secretName: {{ $name }}}
    {{- end }}
    {{- range $i, $name := .Values.verifyKeys.configMaps }}
    - name: verify-configmap-{{ $i }}
      configMap: {name: {{ $name }}}
    {{- end }}
{{- end -}}
