package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

// extremes are values at and past the edges of a key's kind: what an
// operator's typo or a wrong unit gives; a string's also every value its
// schema lists (one may be refused with the chart's other defaults).
func extremes(t *testing.T, typ reflect.Type, valuePath string) []any {
	switch {
	case typ == reflect.TypeOf(config.Duration{}):
		return []any{"0s", "-5s", "60", "10000h", ""}
	case typ.Kind() == reflect.Int:
		return []any{-1, 0, 65536, 99999}
	case typ.Kind() == reflect.Bool:
		return []any{true, false}
	case typ.Kind() == reflect.String:
		return append([]any{"", "bogus", "0.0.0.0:9466", "[::]:9466"}, schemaEnum(t, valuePath)...)
	case typ.Kind() == reflect.Slice:
		return []any{[]string{"bogus"}, []string{"0-1"}, []string{"70000"}, []string{}, []string{""}, []string{"a b"},
			[]string{"x", "x"}, []string{"9000-8000/tcp"}}
	}
	return nil
}

// schemaEnum is the enum values.schema.json gives the value at path.
func schemaEnum(t *testing.T, path string) []any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chart, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var node map[string]any
	if err := json.Unmarshal(b, &node); err != nil {
		t.Fatal(err)
	}
	for _, part := range strings.Split(path, ".") {
		props, _ := node["properties"].(map[string]any)
		node, _ = props[part].(map[string]any)
	}
	enum, _ := node["enum"].([]any)
	return enum
}

// valuePath is the chart value that sets a configuration key: the one
// chart value that owns it (one spelling per key), else
// config.settings.SECTION.KEY.
func valuePath(key string) string {
	if key == "kubernetes.enabled" {
		return key
	}
	if p := chartOwned[key]; strings.HasPrefix(p, "config.") {
		return strings.Fields(p)[0]
	}
	return "config.settings." + key
}

// valuesFile writes values setting each configuration key to its value.
func valuesFile(t *testing.T, dir string, set map[string]any) string {
	t.Helper()
	tree := map[string]any{}
	for key, v := range set {
		parts := strings.Split(valuePath(key), ".")
		node := tree
		for _, p := range parts[:len(parts)-1] {
			if node[p] == nil {
				node[p] = map[string]any{}
			}
			node = node[p].(map[string]any)
		}
		node[parts[len(parts)-1]] = v
	}
	values, err := yaml.Marshal(tree)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(dir, "values-*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(values); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// schemaRefusal begins helm's refusal of values by values.schema.json.
const schemaRefusal = "values don't meet the specifications of the schema"

// pluginReads is the plugin's validation of the ConfigMap helm rendered.
func pluginReads(t *testing.T, rendered string) error {
	t.Helper()
	cm := decodeAll(t, []byte(rendered)).configMaps
	cfg := config.Default()
	if err := config.Decode("ConfigMap", []byte(cm[0].Data["config.toml"]), &cfg); err != nil {
		return err
	}
	return cfg.ValidateOn("ConfigMap", nil, "windows")
}

// lintRefuses is helm lint --strict's answer on the values: it must fail
// where helm template fails (the release's CI and an operator's pipeline
// lint; they must not pass what install refuses).
func lintRefuses(t *testing.T, file string) (string, bool) {
	t.Helper()
	out, err := exec.Command(helmBin(t), "lint", "--strict", chart, "--namespace", "nri-hcn-portmap", "--kube-version", kubeVersion, "--values", file).CombinedOutput()
	return string(out), err != nil
}

// Issue 39: the chart refuses what the plugin refuses. Each key
// config.settings reaches (and each a chart value sets, by its value),
// set to the extremes of its kind, is rendered; where helm takes it, the
// plugin's own validation must take the ConfigMap's configuration too:
// every value the plugin would refuse at start on every node, helm
// refuses first; and where helm template refuses, helm lint --strict
// refuses too.
func TestTheChartRefusesWhatThePluginRefuses(t *testing.T) {
	fields := configFields()
	var keys []string
	for k := range fields {
		if chartOwned[k] == "" || strings.HasPrefix(chartOwned[k], "config.") || k == "kubernetes.enabled" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	dir := t.TempDir()
	var rendered, refused atomic.Int32
	// a key a subtest, two helms at a time (each render is a process)
	t.Run("keys", func(t *testing.T) {
		for _, key := range keys {
			t.Run(key, func(t *testing.T) {
				t.Parallel()
				for _, v := range extremes(t, fields[key], valuePath(key)) {
					file := valuesFile(t, dir, map[string]any{key: v})
					out, err := renderErr(t, "nri-hcn-portmap", "--values-file="+file)
					if err != nil {
						refused.Add(1)
						// helm lint reads the schema as helm template does
						// (TestChartSchema); what the templates refuse, it
						// is asked here
						if strings.Contains(out, schemaRefusal) {
							continue
						}
						if lint, refuses := lintRefuses(t, file); !refuses {
							t.Errorf("%s = %v: helm template refuses it, helm lint --strict passes it:\n%s", key, v, lint)
						}
						continue
					}
					rendered.Add(1)
					if err := pluginReads(t, out); err != nil {
						t.Errorf("%s = %v: helm took it, the plugin refuses it: %v", key, v, err)
					}
				}
			})
		}
	})
	if rendered.Load() == 0 || refused.Load() == 0 {
		t.Fatalf("helm rendered %d values and refused %d: the test must see both", rendered.Load(), refused.Load())
	}
	t.Logf("%d values rendered, %d refused", rendered.Load(), refused.Load())
}

// Issue 39: the rules of the plugin's validation that span two keys or
// need arithmetic (a subnet and its gateway, a range's two ends, a network
// type and what creating it needs) are
// the chart's too: what the plugin refuses, helm template and helm lint
// --strict refuse, naming the key; what it takes, helm renders (and the
// plugin takes the rendering). Each case is first put to the plugin (the
// chart's default configuration with the case over it), so the table
// cannot hold a wrong answer.
func TestTheChartRefusesWhatThePluginRefusesAcrossKeys(t *testing.T) {
	dir := t.TempDir()
	base := config.Default()
	defaults := decodeAll(t, render(t, "nri-hcn-portmap")).configMaps[0].Data["config.toml"]
	if err := config.Decode("ConfigMap", []byte(defaults), &base); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		set   map[string]any
		names string // what helm's refusal names; "" where the plugin takes it
	}{
		{"a gateway outside its subnet", map[string]any{"hcn.subnet": "172.30.0.0/16", "hcn.gateway": "172.31.0.1"}, "hcn.gateway"},
		{"an IPv6 gateway outside its subnet", map[string]any{"hcn.subnet": "fd00:1::/64", "hcn.gateway": "fd00:2::1"}, "hcn.gateway"},
		{"a gateway of the other family", map[string]any{"hcn.subnet": "172.30.0.0/16", "hcn.gateway": "fd00:1::1"}, "hcn.gateway"},
		{"a gateway inside a /15", map[string]any{"hcn.subnet": "172.30.0.0/15", "hcn.gateway": "172.31.255.254"}, ""},
		{"an IPv6 gateway inside its subnet", map[string]any{"hcn.subnet": "fd00:1::/64", "hcn.gateway": "fd00:1::ffff:1"}, ""},
		{"a subnet inside a cluster range", map[string]any{"hcn.subnet": "10.100.0.0/16", "hcn.cluster_ranges": []string{"10.96.0.0/12"}}, "hcn.subnet"},
		{"a subnet around a cluster range", map[string]any{"hcn.subnet": "10.0.0.0/8", "hcn.cluster_ranges": []string{"192.168.0.0/16", "10.96.0.0/12"}}, "hcn.subnet"},
		{"an IPv6 subnet overlapping a cluster range", map[string]any{"hcn.subnet": "fd00:10::/64", "hcn.cluster_ranges": []string{"fd00:10::/108"}}, "hcn.subnet"},
		{"a subnet next to a cluster range", map[string]any{"hcn.subnet": "10.112.0.0/16", "hcn.cluster_ranges": []string{"10.96.0.0/12", "fd00:10::/108"}}, ""},
		{"a reversed host port range", map[string]any{"admission.host_port_ranges": []string{"8000-9000", "9000-8000/tcp"}}, "hostPortRanges"},
		{"a reversed deny range", map[string]any{"admission.deny": []string{"200-100"}}, "deny"},
		{"host port ranges in order", map[string]any{"admission.host_port_ranges": []string{"8000-9000/udp", "80", "443-443"}}, ""},
		{"dual stack on NAT", map[string]any{"hcn.dual_stack": true, "hcn.network_type": "NAT"}, "hcn.dual_stack"},
		{"an L2Bridge to create without a subnet", map[string]any{"hcn.network_type": "L2Bridge", "hcn.allow_cni_network": true}, "hcn.subnet"},
		{"an L2Bridge to create, not allowed", map[string]any{"hcn.network_type": "L2Bridge", "hcn.subnet": "172.30.0.0/16"}, "hcn.network_type"},
		{"an L2Bridge to create, dual stack", map[string]any{"hcn.network_type": "L2Bridge", "hcn.subnet": "172.30.0.0/16",
			"hcn.gateway": "172.30.0.1", "hcn.allow_cni_network": true, "hcn.dual_stack": true}, ""},
		{"an L2Bridge that exists", map[string]any{"hcn.network_type": "L2Bridge", "hcn.create_network": false}, ""},
		{"no Pod Security, no NetworkPolicy, no API server", map[string]any{"kubernetes.enabled": false, "admission.pod_security": "off",
			"admission.network_policy": "off"}, ""},
		{"Hyper-V pods through ncproxy", map[string]any{"hyperv.node_network_service": "127.0.0.1:6668", "hyperv.ncproxy": "[::1]:6669"}, ""},
		{"the NodeNetworkService without ncproxy", map[string]any{"hyperv.node_network_service": "127.0.0.1:6668"}, "hyperv.ncproxy"},
		{"ncproxy without the NodeNetworkService", map[string]any{"hyperv.ncproxy": "127.0.0.1:6669"}, "hyperv.node_network_service"},
		{"one address for both", map[string]any{"hyperv.node_network_service": "127.0.0.1:6668", "hyperv.ncproxy": "127.0.0.1:6668"}, "hyperv.ncproxy"},
		{"the NodeNetworkService on every address", map[string]any{"hyperv.node_network_service": "0.0.0.0:6668", "hyperv.ncproxy": "127.0.0.1:6669"}, "hyperv.node_network_service"},
		{"ncproxy on port 0", map[string]any{"hyperv.node_network_service": "127.0.0.1:6668", "hyperv.ncproxy": "127.0.0.1:0"}, "hyperv.ncproxy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := base
			var toml strings.Builder
			for key, v := range tc.set {
				fmt.Fprintf(&toml, "%s = %s\n", key, tomlOf(v))
			}
			if err := config.Decode("case", []byte(toml.String()), &cfg); err != nil {
				t.Fatal(err)
			}
			pluginErr := cfg.ValidateOn("case", nil, "windows")
			if (pluginErr == nil) != (tc.names == "") {
				t.Fatalf("the plugin's validation: %v; the table says refused=%v", pluginErr, tc.names != "")
			}
			file := valuesFile(t, dir, tc.set)
			out, err := renderErr(t, "nri-hcn-portmap", "--values-file="+file)
			lint, lintRefused := lintRefuses(t, file)
			if tc.names == "" {
				if err != nil || lintRefused {
					t.Fatalf("the plugin takes it; helm template: %v; helm lint --strict:\n%s", err, lint)
				}
				if err := pluginReads(t, out); err != nil {
					t.Errorf("helm's rendering: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(out, tc.names) {
				t.Errorf("the plugin refuses it (%v); helm template: %v, want a refusal naming %s", pluginErr, err, tc.names)
			}
			if !lintRefused || !strings.Contains(lint, tc.names) {
				t.Errorf("helm lint --strict passes what helm template refuses, or names no %s:\n%s", tc.names, lint)
			}
		})
	}
}

// Issue 39, the other way: what an operator writes that the plugin takes,
// the chart's schema takes too (each value checked against the plugin's
// own validation first, so the table cannot hold a wrong one).
func TestTheChartTakesWhatThePluginTakes(t *testing.T) {
	dir := t.TempDir()
	for i, tc := range []struct {
		key string
		v   any
	}{
		{"plugin.resync_interval", "0s"}, {"plugin.resync_interval", "1m30s"}, {"plugin.deadline", "1s"}, {"plugin.deadline", "1500ms"}, {"plugin.deadline", "500ms"},
		{"plugin.shutdown_grace", "3s"}, {"plugin.shutdown_grace", "5m"}, {"plugin.max_mappings_per_pod", 1024},
		{"nri.plugin_index", "09"}, {"nri.reconnect_max", "30s"}, {"hcn.call_timeout", "10s"}, {"hcn.retry_max", "2.5s"},
		{"hcn.subnet", "172.30.0.0/16"}, {"hcn.subnet", "fd00:1::/64"}, {"hcn.gateway", "172.30.0.1"}, {"hcn.gateway", "fd00:1::1"},
		{"hcn.cluster_ranges", []string{"10.96.0.0/12", "fd00:10::/108"}}, {"hcn.route_metric", 65535}, {"hcn.max_concurrent_calls", 64},
		{"kubernetes.labels_max_age", "24h"}, {"kubernetes.labels_max_age", "90s"}, {"kubernetes.queue_size", 65536},
		{"admission.host_ips", []string{"10.0.0.4", "10.0.0.0/24", "fd00::4", "fd00::/64"}},
		{"log.max_files", 0},
	} {
		sec, name, _ := strings.Cut(tc.key, ".")
		values, err := yaml.Marshal(map[string]any{"config": map[string]any{"settings": map[string]any{sec: map[string]any{name: tc.v}}}})
		if err != nil {
			t.Fatal(err)
		}
		cfg := config.Default()
		toml := fmt.Sprintf("[%s]\n%s = %s\n", sec, name, tomlOf(tc.v))
		if err := config.Decode("sample", []byte(toml), &cfg); err != nil {
			t.Fatalf("%s = %v: %v", tc.key, tc.v, err)
		}
		if sec == "hcn" && (name == "subnet" || name == "gateway") {
			cfg.HCN.Subnet, cfg.HCN.Gateway = "", "" // each alone: the pair's own rule is not this test's
		}
		if err := cfg.ValidateOn("sample", nil, "windows"); err != nil {
			t.Fatalf("%s = %v is no value the plugin takes: %v", tc.key, tc.v, err)
		}
		file := filepath.Join(dir, fmt.Sprintf("ok-%d.yaml", i))
		if err := os.WriteFile(file, values, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := renderErr(t, "nri-hcn-portmap", "--values-file="+file); err != nil {
			t.Errorf("%s = %v: the plugin takes it, helm refuses it:\n%s", tc.key, tc.v, out)
		}
	}
}

func tomlOf(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("%q", v)
	case []string:
		q := make([]string, len(v))
		for i, s := range v {
			q[i] = fmt.Sprintf("%q", s)
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	return fmt.Sprint(v)
}

// Issues 46 and 54: the chart refuses the namespaces the cluster or other
// workloads share (whoever creates a pod there may run it as the plugin's
// ServiceAccount), naming the namespace to use, in helm template and in
// helm lint alike. A namespace of its own renders.
func TestTheChartRefusesASharedNamespace(t *testing.T) {
	for _, ns := range []string{"kube-system", "default", "kube-public", "kube-node-lease"} {
		out, err := renderErr(t, "nri-hcn-portmap", "--namespace="+ns)
		if err == nil || !strings.Contains(out, "the release's namespace is "+ns) || !strings.Contains(out, "-n nri-hcn-portmap") {
			t.Errorf("helm template -n %s: %v\n%s; want refused, naming it and the namespace to use", ns, err, out)
		}
	}
	// helm lint's namespace is default unless told
	if out, err := exec.Command(helmBin(t), "lint", "--strict", chart, "--kube-version", kubeVersion).CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "the release's namespace is default") {
		t.Errorf("helm lint with no namespace: %v\n%s; want refused", err, out)
	}
	if _, err := renderErr(t, "nri-hcn-portmap", "--namespace=windows-system"); err != nil {
		t.Fatalf("a namespace of its own: %v", err)
	}
}

// Issue 48: values no node can use are refused where they are written:
// helm template and helm lint --strict refuse the chart's values, and the
// plugin's `config dump` and `run` refuse the configuration those values
// make, all four with the plugin's sentence.
func TestValuesNoNodeCanUseAreRefusedInOneSentence(t *testing.T) {
	dir := t.TempDir()
	bin, err := harness.BuildPlugin(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name   string
		values map[string]any
		toml   string // what the values make of the plugin's configuration
		why    string
	}{
		{"an admin port past 65535", map[string]any{"config": map[string]any{"adminListen": "127.0.0.1:99999"}},
			"[admin]\nlisten = \"127.0.0.1:99999\"\n", config.PortWhy("99999")},
		{"metrics on the admin port", map[string]any{"metrics": map[string]any{"port": 9466}},
			"[admin]\nmetrics_listen = \":9466\"\n", config.AdminPortWhy(9466, "127.0.0.1:9466")},
		{"metrics on kubelet's port", map[string]any{"metrics": map[string]any{"port": 10250}},
			"[admin]\nmetrics_listen = \":10250\"\n", config.DeniedWhy(10250, "10248-10250")},
		// issue 55: a Windows path in YAML "double quotes" (C:, a tab,
		// "emp", a newline, "ew.log") is refused where it is written, as
		// the plugin refuses it in TOML's
		{"a Windows path in double quotes", map[string]any{"config": map[string]any{"settings": map[string]any{"hcn": map[string]any{"adapter": "C:\temp\new.log"}}}},
			"[hcn]\nadapter = \"C:\\temp\\new.log\"\n", `holds a tab (\t) and a newline (\n)`},
		// issue 55: every number in the plugin's sentence, not the
		// schema's words
		{"metrics on port 0", map[string]any{"metrics": map[string]any{"port": 0}},
			"[admin]\nmetrics_listen = \":0\"\n", config.PortWhy("0")},
		{"metrics on port 65536", map[string]any{"metrics": map[string]any{"port": 65536}},
			"[admin]\nmetrics_listen = \":65536\"\n", config.PortWhy("65536")},
		// issue 55: kubelet's port is refused whatever the deny list says
		{"metrics on kubelet's port, off the deny list", map[string]any{"metrics": map[string]any{"port": 10250},
			"config": map[string]any{"admission": map[string]any{"deny": []string{"3389"}}}},
			"[admin]\nmetrics_listen = \":10250\"\n[admission]\ndeny = [\"3389\"]\n", config.NodePortWhy(10250, "10248-10250")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			values, err := yaml.Marshal(tc.values)
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(dir, fmt.Sprintf("values-%d.yaml", i))
			conf := filepath.Join(dir, fmt.Sprintf("config-%d.toml", i))
			if err := os.WriteFile(file, values, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(conf, []byte(tc.toml), 0o600); err != nil {
				t.Fatal(err)
			}
			if out, err := renderErr(t, "nri-hcn-portmap", "--values-file="+file); err == nil || !strings.Contains(out, tc.why) {
				t.Errorf("helm template: %v, want refused saying %q:\n%s", err, tc.why, out)
			}
			if lint, refused := lintRefuses(t, file); !refused || !strings.Contains(lint, tc.why) {
				t.Errorf("helm lint --strict: refused %v, want refused saying %q:\n%s", refused, tc.why, lint)
			}
			for _, args := range [][]string{{"config", "dump", "--config", conf}, {"run", "--config", conf}} {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
				cancel()
				if err == nil || !strings.Contains(string(out), tc.why) {
					t.Errorf("nri-hcn-portmap %s: %v, want refused saying %q:\n%s", strings.Join(args, " "), err, tc.why, out)
				}
			}
		})
	}
}

// Issue 48: what the cluster would refuse at install is refused at
// template time, saying why: a monitor whose kind the cluster does not
// have (the Prometheus Operator's CRDs missing), and a Service name past
// 63 characters; helm lint --strict refuses them too.
func TestTheChartRefusesWhatTheClusterWouldRefuse(t *testing.T) {
	long := strings.Repeat("n", 69)
	for _, tc := range []struct {
		name string
		set  []string
		want string // "" where it renders
	}{
		{"a PodMonitor without its CRD", []string{"metrics.podMonitor.enabled=true"}, "the cluster has no PodMonitor"},
		{"a PodMonitor with its CRD", []string{"metrics.podMonitor.enabled=true", "--api-versions=" + podMonitorAPI}, ""},
		{"a ServiceMonitor without its CRD", []string{"metrics.serviceMonitor.enabled=true"}, "the cluster has no ServiceMonitor"},
		{"a Service name past 63", []string{"metrics.serviceMonitor.enabled=true", "--api-versions=" + serviceMonitorAPI, "fullnameOverride=" + long},
			"a Service's name is at most 63"},
		{"a Service name of 63", []string{"metrics.serviceMonitor.enabled=true", "--api-versions=" + serviceMonitorAPI, "fullnameOverride=" + long[:55]}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := renderErr(t, "nri-hcn-portmap", tc.set...)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("helm template: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(out, tc.want) {
				t.Fatalf("helm template: %v, want refused saying %q:\n%s", err, tc.want, out)
			}
			// helm lint knows no API versions but the built-in ones: it
			// refuses every monitor, naming the missing kind
			args := []string{"lint", "--strict", chart, "--namespace", "nri-hcn-portmap", "--kube-version", kubeVersion}
			for _, s := range tc.set {
				if strings.HasPrefix(s, "--api-versions=") {
					return
				}
				args = append(args, "--set", s)
			}
			lint, lerr := exec.Command(helmBin(t), args...).CombinedOutput()
			if lerr == nil || !strings.Contains(string(lint), tc.want) {
				t.Errorf("helm lint --strict: %v, want refused saying %q:\n%s", lerr, tc.want, lint)
			}
			if !strings.Contains(string(lint), "helm lint --set metrics.monitoringCRDs=true") && strings.Contains(tc.want, "the cluster has no") {
				t.Errorf("helm lint's refusal does not say how to lint values with a monitor:\n%s", lint)
			}
		})
	}
	// issue 55: production values with monitors lint by the documented
	// route (lint has no --api-versions): metrics.monitoringCRDs states
	// the CRDs are installed, and the monitors render
	args := []string{"lint", "--strict", chart, "--namespace", "nri-hcn-portmap", "--kube-version", kubeVersion,
		"--set", "metrics.podMonitor.enabled=true", "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.monitoringCRDs=true"}
	if out, err := exec.Command(helmBin(t), args...).CombinedOutput(); err != nil {
		t.Errorf("helm lint --strict with monitors and metrics.monitoringCRDs=true: %v\n%s", err, out)
	}
	out := string(render(t, "nri-hcn-portmap", "metrics.podMonitor.enabled=true", "metrics.serviceMonitor.enabled=true", "metrics.monitoringCRDs=true"))
	if !strings.Contains(out, "kind: PodMonitor") || !strings.Contains(out, "kind: ServiceMonitor") {
		t.Errorf("helm template with metrics.monitoringCRDs=true renders no monitor:\n%s", out)
	}
}

// Issue 55: the chart keeps the node's own services' ports from the
// plugin's listeners as the plugin does (config.DefaultDeny), whatever
// admission.deny says: each entry's first port is refused for metrics in
// the plugin's words.
func TestTheChartKeepsTheNodesOwnPortsAsThePluginDoes(t *testing.T) {
	for _, entry := range config.DefaultDeny() {
		lo, _, _ := strings.Cut(entry, "-")
		out, err := renderErr(t, "nri-hcn-portmap", "metrics.port="+lo, "config.admission.deny={1}")
		port, _ := strconv.Atoi(lo)
		if why := config.NodePortWhy(uint16(port), entry); err == nil || !strings.Contains(out, why) {
			t.Errorf("metrics.port=%s with admission.deny [1]: %v, want refused saying %q:\n%s", lo, err, why, out)
		}
	}
}

// Issue 55: a key config.settings does not offer is refused at helm
// template and lint in the plugin's words (config/suggest.go), the
// did-you-mean included: the chart computes the same suggestion (the
// schema's "additional properties not allowed" named none).
func TestTheChartNamesAnUnknownSettingAsThePluginDoes(t *testing.T) {
	for _, tc := range []struct{ set, toml string }{
		{"config.settings.hcn.netwrok=nat", "[hcn]\nnetwrok = \"nat\"\n"},
		{"config.settings.hnc.network=nat", "[hnc]\nnetwork = \"nat\"\n"},
		{"config.settings.log.live=x", "[log]\nlive = \"x\"\n"},
		{"config.settings.plugin.network=nat", "[plugin]\nnetwork = \"nat\"\n"},
		{"config.settings.qqqq.x=1", "[qqqq]\nx = 1\n"},
		{"config.settings.hcn.zzzzzzzz=1", "[hcn]\nzzzzzzzz = 1\n"},
	} {
		cfg := config.Default()
		err := config.Decode("c.toml", []byte(tc.toml), &cfg)
		_, said, ok := strings.Cut(fmt.Sprint(err), "unknown key ")
		if !ok {
			t.Fatalf("%s: the plugin says %v", tc.toml, err)
		}
		said = "unknown key " + said
		out, rerr := renderErr(t, "nri-hcn-portmap", tc.set)
		if rerr == nil || !strings.Contains(out, said) {
			t.Errorf("helm template --set %s: %v, want refused saying %q:\n%s", tc.set, rerr, said, out)
		}
		lint, lerr := exec.Command(helmBin(t), "lint", "--strict", chart, "--namespace", "nri-hcn-portmap", "--kube-version", kubeVersion, "--set", tc.set).CombinedOutput()
		if lerr == nil || !strings.Contains(string(lint), said) {
			t.Errorf("helm lint --set %s: %v, want refused saying %q:\n%s", tc.set, lerr, said, lint)
		}
	}
}
