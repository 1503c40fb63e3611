package deploy

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
)

// extremes are values at and past the edges of a key's kind: what an
// operator's typo or a wrong unit gives.
func extremes(typ reflect.Type) []any {
	switch {
	case typ == reflect.TypeOf(config.Duration{}):
		return []any{"0s", "-5s", "60", "10000h"}
	case typ.Kind() == reflect.Int:
		return []any{-1, 0, 65536, 99999}
	case typ.Kind() == reflect.String:
		return []any{"", "bogus", "0.0.0.0:9466", "[::]:9466"}
	case typ.Kind() == reflect.Slice:
		return []any{[]string{"bogus"}, []string{"0-1"}, []string{"70000"}, []string{}}
	}
	return nil
}

// Issue 39: the chart refuses what the plugin refuses. Each key
// config.settings reaches (and each a chart value sets, by its value),
// set to the extremes of its kind, is rendered;
// where helm takes it, the plugin's own validation must take the
// ConfigMap's configuration too: every value the plugin would refuse at
// start on every node, helm refuses first (helm template and helm lint
// read the same schema).
func TestTheChartRefusesWhatThePluginRefuses(t *testing.T) {
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range configFields() {
			if chartOwned[k] == "" && !yield(k) {
				return
			}
		}
	})
	fields := configFields()
	// the keys a chart value sets (one spelling: that value's), by its path
	valuePaths := map[string]string{"admin.listen": "config.adminListen", "hcn.network": "config.network",
		"admission.host_port_ranges": "config.admission.hostPortRanges", "admission.deny": "config.admission.deny",
		"admission.namespaces": "config.admission.namespaces", "admission.pod_selector": "config.admission.podSelector",
		"admission.pod_security_exempt_namespaces": "config.admission.podSecurityExemptNamespaces"}
	for key := range valuePaths {
		keys = append(keys, key)
	}
	dir := t.TempDir()
	var took []string
	rendered := 0
	for _, key := range keys {
		sec, name, _ := strings.Cut(key, ".")
		for i, v := range extremes(fields[key]) {
			var tree map[string]any = map[string]any{"config": map[string]any{"settings": map[string]any{sec: map[string]any{name: v}}}}
			if path, ok := valuePaths[key]; ok {
				parts := strings.Split(path, ".")
				tree = map[string]any{parts[len(parts)-1]: v}
				for i := len(parts) - 2; i >= 0; i-- {
					tree = map[string]any{parts[i]: tree}
				}
			}
			values, err := yaml.Marshal(tree)
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(dir, fmt.Sprintf("%s-%d.yaml", key, i))
			if err := os.WriteFile(file, values, 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := renderErr(t, "nri-hcn-portmap", "--values-file="+file)
			if err != nil {
				continue // helm refused it
			}
			rendered++
			cm := decodeAll(t, []byte(out)).configMaps
			cfg := config.Default()
			err = config.Decode("ConfigMap", []byte(cm[0].Data["config.toml"]), &cfg)
			if err == nil {
				err = cfg.Validate("ConfigMap", nil)
			}
			if err != nil {
				took = append(took, fmt.Sprintf("%s = %v: helm took it, the plugin refuses it: %v", key, v, err))
			}
		}
	}
	if rendered == 0 {
		t.Fatal("helm refused every value: the test renders nothing")
	}
	t.Logf("%d values rendered", rendered)
	for _, s := range took {
		t.Error(s)
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
		{"plugin.resync_interval", "0s"}, {"plugin.resync_interval", "1m30s"}, {"plugin.deadline", "1.5s"}, {"plugin.deadline", "500ms"},
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
		if err := cfg.Validate("sample", nil); err != nil {
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
