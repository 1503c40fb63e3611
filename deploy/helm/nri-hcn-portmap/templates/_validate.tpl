{{- /*
The rules of the plugin's configuration validation (config/config.go
validate, config/admission.go Parse) that span two values or need
arithmetic, which values.schema.json cannot say: refused here, with the
plugin's words, before a DaemonSet whose every pod would exit at start.
test/deploy/refuse_test.go renders each and runs the plugin's validation.
*/ -}}
{{- define "nri-hcn-portmap.validate" -}}
{{- if eq .Release.Namespace "kube-system" }}
{{- include "nri-hcn-portmap.refuse" "the release's namespace is kube-system: the chart's node-restriction policy holds every ServiceAccount of the release's namespace to one node's pods (pods/status and events), which there would hold kube-system's own controllers; install it into a namespace of its own (kubectl create namespace nri-hcn-portmap, then helm install ... -n nri-hcn-portmap)" }}
{{- end }}
{{- $c := .Values.config }}
{{- $adm := $c.admission }}
{{- $hcn := default dict (default dict $c.settings).hcn }}
{{- if and .Values.daemonset.enabled (not .Values.kubernetes.enabled) (eq $adm.podSecurity "enforce") (has "annotations" $c.mappingSources) }}
{{- include "nri-hcn-portmap.refuse" "config.admission.podSecurity=enforce needs kubernetes.enabled=true: the plugin reads the namespaces' Pod Security labels from the API server, and without them refuses every pod's port-mappings annotation; set kubernetes.enabled=true, or config.admission.podSecurity=off where another policy engine guards the annotation" }}
{{- end }}
{{- range $key, $list := dict "config.admission.hostPortRanges" $adm.hostPortRanges "config.admission.deny" $adm.deny }}
{{- range $list }}
{{- $ports := splitList "-" (regexReplaceAll "/.*$" (toString .) "") }}
{{- if and (eq (len $ports) 2) (gt (atoi (index $ports 0)) (atoi (index $ports 1))) }}
{{- include "nri-hcn-portmap.refuse" (printf "%s = %q: the low port %s is above the high port %s" $key (toString .) (index $ports 0) (index $ports 1)) }}
{{- end }}
{{- end }}
{{- end }}
{{- $type := default "NAT" $hcn.network_type }}
{{- if and $hcn.dual_stack (eq $type "NAT") }}
{{- include "nri-hcn-portmap.refuse" "config.settings.hcn.dual_stack = true: NAT networks do not support IPv6 (hcn.network_type = \"NAT\"); use an L2Bridge network, or turn dual_stack off" }}
{{- end }}
{{- if and $c.createNetwork (eq $type "L2Bridge") (not $hcn.subnet) }}
{{- include "nri-hcn-portmap.refuse" "config.settings.hcn.subnet must be set to create an L2Bridge network (config.createNetwork = true)" }}
{{- end }}
{{- if and $c.createNetwork (ne $type "NAT") (not $c.allowCNINetwork) }}
{{- include "nri-hcn-portmap.refuse" (printf "config.settings.hcn.network_type = %q: endpoints on a network other than NAT get an address HNS picks from its subnet, which a CNI's IPAM on that network does not know (kubernetes 74766); keep NAT, or set config.allowCNINetwork = true if only HNS hands out this network's addresses" $type) }}
{{- end }}
{{- with $hcn.subnet }}
{{- $subnet := splitList "/" . }}
{{- $bits := atoi (index $subnet 1) }}
{{- $net := include "nri-hcn-portmap.ipGroups" (index $subnet 0) | fromJsonArray }}
{{- with $hcn.gateway }}
{{- $gw := include "nri-hcn-portmap.ipGroups" . | fromJsonArray }}
{{- if not (include "nri-hcn-portmap.sameBits" (dict "a" $net "b" $gw "bits" $bits)) }}
{{- include "nri-hcn-portmap.refuse" (printf "config.settings.hcn.gateway = %q: is not inside hcn.subnet %s" . $hcn.subnet) }}
{{- end }}
{{- end }}
{{- range $hcn.cluster_ranges }}
{{- $r := splitList "/" . }}
{{- $rbits := atoi (index $r 1) }}
{{- if include "nri-hcn-portmap.sameBits" (dict "a" $net "b" (include "nri-hcn-portmap.ipGroups" (index $r 0) | fromJsonArray) "bits" (min $bits $rbits)) }}
{{- include "nri-hcn-portmap.refuse" (printf "config.settings.hcn.subnet = %q: overlaps the cluster's range %s (hcn.cluster_ranges): mapped pods could not reach it; pick a subnet clear of it" $hcn.subnet .) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{- /* refuse MESSAGE: stop the render, saying MESSAGE. helm lint's engine
turns fail into a log line (it runs in "lint mode"), so --strict would pass
what helm template and helm install refuse; there the render goes on, and
the include of a template named by the message fails it, the message in
helm's error. */ -}}
{{- define "nri-hcn-portmap.refuse" -}}
{{- fail . }}
{{- include (printf "refused: %s" .) dict }}
{{- end }}

{{- /* ipGroups IP: the address as a JSON list of 16-bit numbers, two for
IPv4 and eight for IPv6 (:: expanded). The schema has checked its form. */ -}}
{{- define "nri-hcn-portmap.ipGroups" -}}
{{- $g := list }}
{{- if contains "." . }}
{{- $o := splitList "." . }}
{{- $g = list (add (mul (atoi (index $o 0)) 256) (atoi (index $o 1))) (add (mul (atoi (index $o 2)) 256) (atoi (index $o 3))) }}
{{- else }}
{{- $halves := splitList "::" . }}
{{- $head := list }}
{{- $tail := list }}
{{- if index $halves 0 }}{{ $head = splitList ":" (index $halves 0) }}{{ end }}
{{- if and (gt (len $halves) 1) (index $halves 1) }}{{ $tail = splitList ":" (index $halves 1) }}{{ end }}
{{- range $head }}{{ $g = append $g (int64 (printf "0x%s" .)) }}{{ end }}
{{- range until (int (sub 8 (add (len $head) (len $tail)))) }}{{ $g = append $g 0 }}{{ end }}
{{- range $tail }}{{ $g = append $g (int64 (printf "0x%s" .)) }}{{ end }}
{{- end }}
{{- toJson $g }}
{{- end }}

{{- /* sameBits (dict "a" GROUPS "b" GROUPS "bits" N): "true" when the two
addresses are of one family and their first N bits are equal. */ -}}
{{- define "nri-hcn-portmap.sameBits" -}}
{{- $pow := list 1 2 4 8 16 32 64 128 256 512 1024 2048 4096 8192 16384 32768 65536 }}
{{- $same := eq (len .a) (len .b) }}
{{- if $same }}
{{- range $i, $x := .a }}
{{- $lo := mul $i 16 }}
{{- if lt $lo $.bits }}
{{- $d := index $pow (int (sub 16 (min 16 (sub $.bits $lo)))) }}
{{- if ne (div (int64 $x) $d) (div (int64 (index $.b $i)) $d) }}{{ $same = false }}{{ end }}
{{- end }}
{{- end }}
{{- end }}
{{- if $same }}true{{ end }}
{{- end }}
