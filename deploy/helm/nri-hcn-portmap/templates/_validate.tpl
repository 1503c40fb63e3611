{{- /*
The rules of the plugin's configuration validation (config/config.go
validate, config/admission.go Parse) that span two values or need
arithmetic, which values.schema.json cannot say: refused here, with the
plugin's words, before a DaemonSet whose every pod would exit at start.
test/deploy/refuse_test.go renders each and runs the plugin's validation.
*/ -}}
{{- define "nri-hcn-portmap.validate" -}}
{{- if has .Release.Namespace (list "kube-system" "default" "kube-public" "kube-node-lease") }}
{{- include "nri-hcn-portmap.refuse" (printf "the release's namespace is %s, which the cluster or other workloads share: whoever may create a pod there may run it as the plugin's ServiceAccount and write with its grant (the condition and events of pods), and a stolen token there is one among many; install it into a namespace of its own (kubectl create namespace nri-hcn-portmap, then helm install ... -n nri-hcn-portmap)" .Release.Namespace) }}
{{- end }}
{{- /* a control character in any string of config (config/decode.go
controlsWritten): almost always a Windows path in YAML "double quotes",
where C:\temp\new.log is C:, a tab, "emp", a newline and "ew.log";
first, as every other check reads the value as made */ -}}
{{- include "nri-hcn-portmap.controls" (dict "path" "config" "v" .Values.config) }}
{{- include "nri-hcn-portmap.settingsKeys" . }}
{{- /* the plugin's own ports, in the plugin's sentences (config/config.go
ValidateOn, PortWhy, AdminPortWhy, DeniedWhy): admin.listen's a TCP port
(before the patterns, whose words say less) */ -}}
{{- $adminPort := 0 }}
{{- with .Values.config.adminListen }}
{{- $p := regexReplaceAll "^.*:" (toString .) "" }}
{{- if regexMatch "^[0-9]+$" $p }}
{{- if or (eq (len $p) 0) (gt (len $p) 5) (lt (atoi $p) 1) (gt (atoi $p) 65535) }}
{{- include "nri-hcn-portmap.refuse" (printf "config.adminListen = %q (admin.listen): port %s is no TCP port: it must be 1 to 65535" . $p) }}
{{- end }}
{{- $adminPort = atoi $p }}
{{- end }}
{{- end }}
{{- /* each value's pattern (values.schema.json keeps them where helm's
schema check, which would print the regular expression, does not read
them: templates/_patterns.tpl), refused in the schema's words; first, as
the checks below take the forms as checked */ -}}
{{- range include "nri-hcn-portmap.patterns" . | fromJsonArray }}
{{- $check := . }}
{{- $name := join "." $check.path | replace ".[]" "" }}
{{- $key := "" }}
{{- with $check.key }}{{ $key = printf " (%s)" . }}{{ end }}
{{- range include "nri-hcn-portmap.at" (dict "v" $.Values "path" $check.path) | fromJsonArray }}
{{- $what := printf "%s = %s%s" $name (toJson .) $key }}
{{- if has "[]" $check.path }}{{ $what = printf "%s entry %s%s" $name (toJson .) $key }}{{ end }}
{{- if and $check.duration (not (kindIs "string" .)) }}
{{- include "nri-hcn-portmap.refuse" (printf "%s: a duration is a string with its unit, e.g. \"%vs\"; %s" $what . $check.words) }}
{{- else if and (kindIs "string" .) (not (regexMatch $check.pattern .)) }}
{{- include "nri-hcn-portmap.refuse" (printf "%s: %s" $what $check.words) }}
{{- end }}
{{- end }}
{{- end }}
{{- $c := .Values.config }}
{{- $adm := $c.admission }}
{{- /* metrics on a port of their own; neither port one admission.deny
keeps for the node's own services (kubelet's 10250 among them) */ -}}
{{- $own := list }}
{{- if $adminPort }}
{{- $own = append $own (dict "what" (printf "config.adminListen = %q (admin.listen)" $c.adminListen) "port" $adminPort) }}
{{- end }}
{{- if .Values.metrics.enabled }}
{{- $mp := int .Values.metrics.port }}
{{- $what := printf "metrics.port = %d (admin.metrics_listen = \":%d\")" $mp $mp }}
{{- if or (lt $mp 1) (gt $mp 65535) }}
{{- include "nri-hcn-portmap.refuse" (printf "%s: port %d is no TCP port: it must be 1 to 65535" $what $mp) }}
{{- end }}
{{- if eq $mp $adminPort }}
{{- include "nri-hcn-portmap.refuse" (printf "%s: port %d is admin.listen's (%s): give metrics a port of their own" $what $mp $c.adminListen) }}
{{- end }}
{{- $own = append $own (dict "what" $what "port" $mp) }}
{{- end }}
{{- range $o := $own }}
{{- range $adm.deny }}
{{- $entry := toString . }}
{{- $proto := "" }}
{{- if contains "/" $entry }}{{ $proto = lower (regexReplaceAll "^[^/]*/" $entry "") }}{{ end }}
{{- $ends := splitList "-" (regexReplaceAll "/.*$" $entry "") }}
{{- $lo := atoi (first $ends) }}
{{- $hi := atoi (last $ends) }}
{{- if and (ne $proto "udp") (le $lo (int $o.port)) (le (int $o.port) $hi) }}
{{- include "nri-hcn-portmap.refuse" (printf "%s: port %d is on admission.deny (%s), the ports kept for the node's own services: pick another port" $o.what (int $o.port) $entry) }}
{{- end }}
{{- end }}
{{- /* the node's own services' ports whatever admission.deny says
(config/admission.go DefaultDeny, config.go NodePortWhy) */ -}}
{{- range $entry := list "3389" "5985-5986" "47001" "10248-10250" "10255-10256" }}
{{- $ends := splitList "-" $entry }}
{{- if and (le (atoi (first $ends)) (int $o.port)) (le (int $o.port) (atoi (last $ends))) }}
{{- include "nri-hcn-portmap.refuse" (printf "%s: port %d is one the node's own services hold (%s, kept whatever admission.deny says): pick another port" $o.what (int $o.port) $entry) }}
{{- end }}
{{- end }}
{{- end }}
{{- $hcn := default dict (default dict $c.settings).hcn }}
{{- if and .Values.daemonset.enabled (not .Values.kubernetes.enabled) (eq $adm.podSecurity "enforce") (has "annotations" $c.mappingSources) }}
{{- include "nri-hcn-portmap.refuse" "config.admission.podSecurity=enforce needs kubernetes.enabled=true: the plugin reads the namespaces' Pod Security labels from the API server, and without them refuses every pod's port-mappings annotation; set kubernetes.enabled=true, or config.admission.podSecurity=off where another policy engine guards the annotation" }}
{{- end }}
{{- if and .Values.daemonset.enabled (not .Values.kubernetes.enabled) (ne $adm.networkPolicy "off") }}
{{- include "nri-hcn-portmap.refuse" (printf "config.admission.networkPolicy=%s needs kubernetes.enabled=true: the plugin reads the NetworkPolicies that may isolate a pod from the API server, and without them maps no host port; set kubernetes.enabled=true, or config.admission.networkPolicy=off where no NetworkPolicy needs to filter host ports" $adm.networkPolicy) }}
{{- end }}
{{- range $key, $list := dict "config.admission.hostPortRanges" $adm.hostPortRanges "config.admission.deny" $adm.deny }}
{{- range $list }}
{{- $ports := splitList "-" (regexReplaceAll "/.*$" (toString .) "") }}
{{- if and (eq (len $ports) 2) (gt (atoi (index $ports 0)) (atoi (index $ports 1))) }}
{{- include "nri-hcn-portmap.refuse" (printf "%s = %q: the low port %s is above the high port %s" $key (toString .) (index $ports 0) (index $ports 1)) }}
{{- end }}
{{- end }}
{{- end }}
{{- $hv := default dict (default dict $c.settings).hyperv }}
{{- if and $hv.node_network_service (not $hv.ncproxy) }}
{{- include "nri-hcn-portmap.refuse" "config.settings.hyperv.ncproxy must be set with config.settings.hyperv.node_network_service: ncproxy's gRPC address (its config's grpc, 127.0.0.1:6669 by default), where the pod's adapters are added" }}
{{- end }}
{{- if and $hv.ncproxy (not $hv.node_network_service) }}
{{- include "nri-hcn-portmap.refuse" "config.settings.hyperv.node_network_service must be set with config.settings.hyperv.ncproxy: the address ncproxy's node_net_svc_addr names (127.0.0.1:6668 by default)" }}
{{- end }}
{{- if and $hv.ncproxy (eq (toString $hv.ncproxy) (toString $hv.node_network_service)) }}
{{- include "nri-hcn-portmap.refuse" (printf "config.settings.hyperv.ncproxy = %q: is config.settings.hyperv.node_network_service's address: ncproxy listens on its own (its config's grpc)" $hv.ncproxy) }}
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

{{- /* at (dict "v" VALUES "path" LIST): the values at path in VALUES, as a
JSON list: none where a step is missing or null, each entry of a list
where a step is "[]". */ -}}
{{- define "nri-hcn-portmap.at" -}}
{{- $found := list .v }}
{{- range .path }}
{{- $step := . }}
{{- $next := list }}
{{- range $found }}
{{- if eq $step "[]" }}
{{- if kindIs "slice" . }}{{ $next = concat $next . }}{{ end }}
{{- else if and (kindIs "map" .) (hasKey . $step) }}
{{- $next = append $next (get . $step) }}
{{- end }}
{{- end }}
{{- $found = $next }}
{{- end }}
{{- $out := list }}
{{- range $found }}{{ if not (kindIs "invalid" .) }}{{ $out = append $out . }}{{ end }}{{ end }}
{{- toJson $out }}
{{- end }}

{{- /* refuse MESSAGE: stop the render, saying MESSAGE. helm lint's engine
turns fail into a log line (it runs in "lint mode"), so --strict would pass
what helm template and helm install refuse; there the render goes on, and
the include of a template named by the message fails it, the message in
helm's error. */ -}}
{{- /* controls refuses a string of v (a map, a list or a string, at
path) that holds a control character, naming each as the plugin does. */ -}}
{{- define "nri-hcn-portmap.controls" -}}
{{- $path := .path }}
{{- if kindIs "map" .v }}
{{- range $k, $v := .v }}{{ include "nri-hcn-portmap.controls" (dict "path" (printf "%s.%s" $path $k) "v" $v) }}{{ end }}
{{- else if kindIs "slice" .v }}
{{- range $i, $v := .v }}{{ include "nri-hcn-portmap.controls" (dict "path" (printf "%s[%d]" $path $i) "v" $v) }}{{ end }}
{{- else if and (kindIs "string" .v) (regexMatch "[[:cntrl:]]" .v) }}
{{- $names := list }}
{{- range $c := list (list "\t" "a tab (\\t)") (list "\n" "a newline (\\n)") (list "\r" "a carriage return (\\r)") (list "\b" "a backspace (\\b)") (list "\f" "a form feed (\\f)") }}
{{- if contains (first $c) $.v }}{{ $names = append $names (last $c) }}{{ end }}
{{- end }}
{{- if not $names }}{{ $names = list "a control character" }}{{ end }}
{{- $said := join " and " $names }}
{{- if gt (len $names) 2 }}{{ $said = printf "%s and %s" (join ", " (initial $names)) (last $names) }}{{ end }}
{{- $fixed := .v | replace "\t" "\\t" | replace "\n" "\\n" | replace "\r" "\\r" | replace "\b" "\\b" | replace "\f" "\\f" }}
{{- $key := regexReplaceAll "^.*\\." $path "" }}
{{- include "nri-hcn-portmap.refuse" (printf "%s = %s: holds %s: in YAML \"double quotes\" a backslash starts an escape; write a Windows path in 'single quotes' (%s: '%s'), or double each backslash" $path (toJson .v) $said $key $fixed) }}
{{- end }}
{{- end }}

{{- /* settingsKeys refuses a key of config.settings the plugin does not
know, naming what it is likely a typo of as the plugin does
(config/suggest.go: the section's keys first, then every key, the nearest
by edit distance within a third of its length and at most 3, all of them
on a tie), and a key the chart sets itself (not offered by the schema). */ -}}
{{- define "nri-hcn-portmap.settingsKeys" -}}
{{- $all := include "nri-hcn-portmap.configKeys" . | fromJsonArray }}
{{- $offered := include "nri-hcn-portmap.offeredSettings" . | fromJson }}
{{- $sections := list }}
{{- range $all }}{{ $sections = append $sections (first (splitList "." .)) }}{{ end }}
{{- $sections = uniq $sections }}
{{- range $section, $kv := .Values.config.settings }}
{{- if not (has $section $sections) }}
{{- $near := include "nri-hcn-portmap.closest" (dict "s" $section "in" $sections) | fromJsonArray }}
{{- $said := printf "the sections are [%s]" (join "], [" $sections) }}
{{- if $near }}{{ $said = printf "did you mean [%s]?" (join "] or [" $near) }}{{ end }}
{{- include "nri-hcn-portmap.refuse" (printf "config.settings.%s: unknown key %q: %s" $section $section $said) }}
{{- end }}
{{- $props := default list (get $offered $section) }}
{{- range $k, $v := (kindIs "map" $kv | ternary $kv dict) }}
{{- $key := printf "%s.%s" $section $k }}
{{- if not (has $k $props) }}
{{- if has $key $all }}
{{- include "nri-hcn-portmap.refuse" (printf "config.settings.%s: %s is set by the chart (its own value in values.yaml, or the pod's), not in config.settings" $key $key) }}
{{- end }}
{{- $homes := list }}
{{- range $all }}{{ if eq (last (splitList "." .)) $k }}{{ $homes = append $homes . }}{{ end }}{{ end }}
{{- if $homes }}
{{- $where := list }}
{{- range $homes }}{{ $where = append $where (printf "[%s]" (first (splitList "." .))) }}{{ end }}
{{- include "nri-hcn-portmap.refuse" (printf "config.settings.%s: unknown key %q: %s belongs in %s: %s" $key $key $k (join " or " $where) (join ", " $homes)) }}
{{- end }}
{{- $own := list }}
{{- range $all }}{{ if hasPrefix (printf "%s." $section) . }}{{ $own = append $own . }}{{ end }}{{ end }}
{{- $near := include "nri-hcn-portmap.closest" (dict "s" $key "in" $own) | fromJsonArray }}
{{- if not $near }}{{ $near = include "nri-hcn-portmap.closest" (dict "s" $key "in" $all) | fromJsonArray }}{{ end }}
{{- $said := "" }}
{{- if $near }}{{ $said = printf ": did you mean %s?" (join " or " $near) }}{{ end }}
{{- include "nri-hcn-portmap.refuse" (printf "config.settings.%s: unknown key %q%s" $key $key $said) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{- /* closest is the candidates of .in nearest to .s (JSON), as
config/suggest.go closest: none past min(3, max(1, len/3)). */ -}}
{{- define "nri-hcn-portmap.closest" -}}
{{- $s := .s }}
{{- $best := list }}
{{- $bestD := -1 }}
{{- range .in }}
{{- $d := include "nri-hcn-portmap.distance" (dict "a" $s "b" .) | atoi }}
{{- if or (lt $bestD 0) (lt $d $bestD) }}{{ $best = list . }}{{ $bestD = $d }}
{{- else if eq $d $bestD }}{{ $best = append $best . }}{{ end }}
{{- end }}
{{- if or (lt $bestD 0) (gt $bestD (min 3 (max 1 (div (len $s) 3)))) }}[]{{ else }}{{ sortAlpha $best | toJson }}{{ end }}
{{- end }}

{{- /* distance is the optimal-string-alignment edit distance of .a and .b
(an adjacent swap counts one), as config/suggest.go distance. */ -}}
{{- define "nri-hcn-portmap.distance" -}}
{{- $a := splitList "" .a }}
{{- $b := splitList "" .b }}
{{- $prev2 := list }}
{{- $prev := until (int (add (len $b) 1)) }}
{{- range $i := until (len $a) }}
{{- $cur := list (add $i 1) }}
{{- range $j := until (len $b) }}
{{- $cost := 1 }}
{{- if eq (index $a $i) (index $b $j) }}{{ $cost = 0 }}{{ end }}
{{- $v := min (add (index $prev (add $j 1)) 1) (add (last $cur) 1) (add (index $prev $j) $cost) }}
{{- if and (gt $i 0) (gt $j 0) }}
{{- if and (eq (index $a $i) (index $b (sub $j 1))) (eq (index $a (sub $i 1)) (index $b $j)) }}
{{- $v = min $v (add (index $prev2 (sub $j 1)) 1) }}
{{- end }}
{{- end }}
{{- $cur = append $cur $v }}
{{- end }}
{{- $prev2 = $prev }}
{{- $prev = $cur }}
{{- end }}
{{- last $prev }}
{{- end }}

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
