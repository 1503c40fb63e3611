{{- define "nri-hcn-portmap.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- /* The release's object names: the release name when it contains the
chart's name (the default install, `helm install nri-hcn-portmap`), else
release-chart; fullnameOverride sets it. */ -}}
{{- define "nri-hcn-portmap.fullname" -}}
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

{{- define "nri-hcn-portmap.selectorLabels" -}}
app.kubernetes.io/name: {{ include "nri-hcn-portmap.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "nri-hcn-portmap.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "nri-hcn-portmap.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- /* The image: registry/repository, then :tag or @digest; the registry
is global.imageRegistry where set, else image.registry. A repository that
begins with a registry of its own (the chart's earlier spelling,
image.repository=REGISTRY/NAME) is refused, not put behind another. */ -}}
{{- define "nri-hcn-portmap.image" -}}
{{- $img := .Values.image }}
{{- $registry := default $img.registry (default dict .Values.global).imageRegistry }}
{{- $first := first (splitList "/" $img.repository) }}
{{- if and $registry (contains "/" $img.repository) (or (contains "." $first) (contains ":" $first) (eq $first "localhost")) }}
{{- include "nri-hcn-portmap.refuse" (printf "image.repository = %q begins with a registry (%s), which the registry %s would be put before: set image.registry=%s and image.repository=%s (or image.registry=\"\" to give the whole name)" $img.repository $first $registry $first (trimPrefix (printf "%s/" $first) $img.repository)) }}
{{- end }}
{{- $name := $img.repository }}
{{- if $registry }}{{ $name = printf "%s/%s" (trimSuffix "/" $registry) $img.repository }}{{ end }}
{{- if $img.digest }}
{{- printf "%s@%s" $name $img.digest }}
{{- else }}
{{- printf "%s:%s" $name ($img.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{- /* The HostProcess pod settings both DaemonSets share. */ -}}
{{- define "nri-hcn-portmap.hostProcess" -}}
nodeSelector:
  {{- toYaml .Values.nodeSelector | nindent 2 }}
tolerations:
  {{- toYaml .Values.tolerations | nindent 2 }}
priorityClassName: {{ .Values.priorityClassName }}
{{- with .Values.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
# A HostProcess container (Kubernetes 1.23+) runs on the host, as SYSTEM,
# with the host's network: it reaches HNS and containerd's named pipe.
hostNetwork: true
securityContext:
  windowsOptions:
    hostProcess: true
    runAsUserName: "NT AUTHORITY\\SYSTEM"
{{- if not (and .Values.kubernetes.enabled .Values.daemonset.enabled) }}
# Nothing here calls the Kubernetes API.
automountServiceAccountToken: false
{{- end }}
{{- end }}

{{- /* The configuration, as an environment variable kubelet resolves from
the ConfigMap when it starts the container: no file, and no link a local
user of the node could re-point, stands between the ConfigMap and the
plugin (docs/safety.md). A changed ConfigMap rolls the pods (the
checksum/config annotation). */ -}}
{{- define "nri-hcn-portmap.configEnv" -}}
- name: NRI_HCN_PORTMAP_CONFIG
  valueFrom:
    configMapKeyRef:
      name: {{ include "nri-hcn-portmap.fullname" . }}
      key: config.toml
{{- end }}

{{- /* A TOML list of strings: numbers given with --set (80) stay strings. */ -}}
{{- define "nri-hcn-portmap.tomlStrings" -}}
[{{ range $i, $v := . }}{{ if $i }}, {{ end }}{{ $v | toString | quote }}{{ end }}]
{{- end }}

{{/*
The plugin's executable, by %CONTAINER_SANDBOX_MOUNT_POINT% (hcsshim
replaces it in command lines with where the image shows, with the bind
filter and without), quoted for a YAML list.
*/}}
{{- define "nri-hcn-portmap.exe" -}}
"%CONTAINER_SANDBOX_MOUNT_POINT%\\nri-hcn-portmap.exe"
{{- end }}

{{- /* A TOML value of config.settings (dict "key" K "value" V): a string
(quoted), a bool, a whole number, or a list of strings. */ -}}
{{- define "nri-hcn-portmap.tomlValue" -}}
{{- $v := .value }}
{{- if kindIs "string" $v }}{{ $v | quote }}
{{- else if kindIs "bool" $v }}{{ $v }}
{{- else if or (kindIs "float64" $v) (kindIs "int" $v) (kindIs "int64" $v) }}{{ $v | int64 }}
{{- else if kindIs "slice" $v }}{{ include "nri-hcn-portmap.tomlStrings" $v }}
{{- else }}{{ fail (printf "config.settings: %s = %v: want a string, a number, true or false, or a list" .key $v) }}
{{- end }}
{{- end }}

{{- /* The plugin's ServiceAccount: the chart's (the release's name unless
serviceAccount.name says), or one that exists (serviceAccount.create=false). */ -}}
{{- define "nri-hcn-portmap.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "nri-hcn-portmap.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name: the ServiceAccount to run as, when serviceAccount.create=false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- /* The metrics port's Windows Firewall rule: replaced by the plugin's pod
(so a changed metrics.port is the rule's port), removed by the cleanup. No
double quote in either: the cleanup's runs inside cmd /c's one argument,
where containerd's and hcsshim's EscapeArg would turn it into \" and
PowerShell would receive a string, not a command. */ -}}
{{- define "nri-hcn-portmap.firewallRule" -}}
{{ include "nri-hcn-portmap.fullname" . }}-metrics
{{- end }}

{{- define "nri-hcn-portmap.firewallAdd" -}}
Remove-NetFirewallRule -Name '{{ include "nri-hcn-portmap.firewallRule" . }}' -ErrorAction SilentlyContinue; New-NetFirewallRule -Name '{{ include "nri-hcn-portmap.firewallRule" . }}' -DisplayName 'nri-hcn-portmap metrics' -Direction Inbound -Protocol TCP -LocalPort {{ .Values.metrics.port }} -Action Allow | Out-Null
{{- end }}

{{- define "nri-hcn-portmap.firewallRemove" -}}
Remove-NetFirewallRule -Name '{{ include "nri-hcn-portmap.firewallRule" . }}' -ErrorAction SilentlyContinue; exit 0
{{- end }}
