{{- define "nri-hcn-portmap.labels" -}}
app.kubernetes.io/name: nri-hcn-portmap
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{- define "nri-hcn-portmap.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- /* The HostProcess pod settings both DaemonSets share. */ -}}
{{- define "nri-hcn-portmap.hostProcess" -}}
nodeSelector:
  {{- toYaml .Values.nodeSelector | nindent 2 }}
tolerations:
  {{- toYaml .Values.tolerations | nindent 2 }}
priorityClassName: {{ .Values.priorityClassName }}
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
volumes:
  - name: config
    configMap:
      name: nri-hcn-portmap
      items:
        - key: config.toml
          path: config.toml
{{- end }}

{{- /* A TOML list of strings: numbers given with --set (80) stay strings. */ -}}
{{- define "nri-hcn-portmap.tomlStrings" -}}
[{{ range $i, $v := . }}{{ if $i }}, {{ end }}{{ $v | toString | quote }}{{ end }}]
{{- end }}
