package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
)

// chartOwned are the configuration keys the chart sets itself, and why:
// config.settings does not offer them (values.schema.json refuses them).
var chartOwned = map[string]string{
	"hcn.backend":           "a Windows node's HNS",
	"hcn.simulator_address": "the simulator is for Linux tests",
	"containerd.address":    "containerd's named pipe on the node",
	"kubernetes.enabled":    "the kubernetes.enabled value (it also renders the RBAC)",
	"kubernetes.kubeconfig": "the pod's in-cluster ServiceAccount",
	"admin.listen":          "config.adminListen (the probes use it)",
	"admin.metrics_listen":  "metrics.enabled and metrics.port (the pod's port and annotations use them)",
	"admin.socket":          "the plugin's own named pipe, for SYSTEM and Administrators (kubectl exec ... reload runs as the pod's SYSTEM)",
	"admin.key_file":        "the plugin's default, in its folder on the node, where the probes' health and kubectl exec's commands read it",
	"log.file":              "a pod logs to its stdout (kubectl logs)",
	// one spelling per key (issue 39): a key a chart value sets is that
	// value's alone, and config.settings refuses it
	"plugin.source":                            "config.source",
	"plugin.mapping_sources":                   "config.mappingSources",
	"plugin.failure_policy":                    "config.failurePolicy",
	"admission.namespaces":                     "config.admission.namespaces",
	"admission.pod_selector":                   "config.admission.podSelector",
	"admission.host_port_ranges":               "config.admission.hostPortRanges",
	"admission.deny":                           "config.admission.deny",
	"admission.pod_security":                   "config.admission.podSecurity",
	"admission.pod_security_default_level":     "config.admission.podSecurityDefaultLevel",
	"admission.pod_security_exempt_namespaces": "config.admission.podSecurityExemptNamespaces",
	"admission.network_policy":                 "config.admission.networkPolicy",
	"hcn.network":                              "config.network",
	"hcn.create_network":                       "config.createNetwork",
	"hcn.allow_cni_network":                    "config.allowCNINetwork",
	"log.level":                                "config.logLevel",
}

// samples are values unlike the defaults that the plugin takes, for the
// keys whose kind alone does not give one (the schema holds them to what
// the plugin takes: refuse_test.go).
var samples = map[string]any{
	"plugin.deadline":             "700ms",
	"plugin.max_annotation_bytes": 700,
	"nri.plugin_index":            "42",
	"hcn.network_type":            "L2Bridge",
	"hcn.subnet":                  "10.9.0.0/16",
	"hcn.gateway":                 "10.9.0.1",
	"hcn.cluster_ranges":          []string{"10.96.0.0/12"},
	"hcn.default_route":           "none",
	"log.format":                  "text",
	"admission.host_ips":          []string{"10.0.0.4"},
	"hyperv.node_network_service": "127.0.0.1:6668",
	"hyperv.ncproxy":              "127.0.0.1:6669",
}

// configFields is every key of the configuration with its Go kind.
func configFields() map[string]reflect.Type {
	out := map[string]reflect.Type{}
	ct := reflect.TypeOf(config.Config{})
	for i := range ct.NumField() {
		sec := ct.Field(i)
		for j := range sec.Type.NumField() {
			f := sec.Type.Field(j)
			out[sec.Tag.Get("toml")+"."+strings.Split(f.Tag.Get("toml"), ",")[0]] = f.Type
		}
	}
	return out
}

// Issue 32: every configuration key is reachable from the chart: through
// config.settings (each set to a value unlike its default, rendered, and
// read back from the ConfigMap), or it is one the chart owns, named with
// its reason; the schema lists exactly those keys.
func TestChartReachesEveryConfigKey(t *testing.T) {
	settings := map[string]map[string]any{}
	want := map[string]any{}
	for key, typ := range configFields() {
		if chartOwned[key] != "" {
			continue
		}
		sec, name, _ := strings.Cut(key, ".")
		var v any
		switch {
		case samples[key] != nil: // a value the schema takes, as the plugin does
			v = samples[key]
		case typ == reflect.TypeOf(config.Duration{}):
			v = "7s"
		case typ.Kind() == reflect.String:
			v = "sample-" + name
		case typ.Kind() == reflect.Bool:
			v = !reflect.ValueOf(defaultOf(t, key)).Bool()
		case typ.Kind() == reflect.Int:
			v = 7
		case typ.Kind() == reflect.Slice:
			v = []string{"sample-" + name}
		default:
			t.Fatalf("%s: a %s the test does not know", key, typ)
		}
		if settings[sec] == nil {
			settings[sec] = map[string]any{}
		}
		settings[sec][name], want[key] = v, v
	}
	// the samples' L2Bridge network to create is one the plugin takes only
	// with allowCNINetwork (the chart refuses it otherwise, as the plugin)
	values, err := yaml.Marshal(map[string]any{"config": map[string]any{"settings": settings, "allowCNINetwork": true}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(file, values, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := renderErr(t, "nri-hcn-portmap", "--values-file="+file)
	if err != nil {
		t.Fatal(err)
	}
	o := decodeAll(t, []byte(out))
	cfg := config.Default()
	if err := config.Decode("ConfigMap config.toml", []byte(o.configMaps[0].Data["config.toml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	got := flatten(t, cfg)
	for key, v := range want {
		if fmt.Sprint(got[key]) != fmt.Sprint(v) {
			t.Errorf("config.settings %s = %v reached the plugin as %v", key, v, got[key])
		}
	}
	// the schema offers exactly the keys not owned
	var schema struct {
		Properties struct {
			Config struct {
				Properties struct {
					Settings struct {
						Properties map[string]struct {
							Properties map[string]any
						}
					}
				}
			}
		}
	}
	b, err := os.ReadFile(filepath.Join(chart, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	var offered, wantOffered []string
	for sec, s := range schema.Properties.Config.Properties.Settings.Properties {
		for k := range s.Properties {
			offered = append(offered, sec+"."+k)
		}
	}
	for key := range want {
		wantOffered = append(wantOffered, key)
	}
	slices.Sort(offered)
	slices.Sort(wantOffered)
	if !slices.Equal(offered, wantOffered) {
		t.Errorf("values.schema.json config.settings offers\n%v\nwant every key the chart does not own\n%v", offered, wantOffered)
	}
	// an owned key is refused at helm template, naming it: a key a chart
	// value sets has one spelling, the value's
	for _, set := range []string{"config.settings.hcn.backend=simulated", "config.settings.admission.host_port_ranges={80}",
		"config.settings.plugin.source=nri", "config.settings.log.level=debug"} {
		key := strings.Split(strings.TrimPrefix(set, "config.settings."), "=")[0]
		name := key[strings.LastIndex(key, ".")+1:]
		if out, err := renderErr(t, "nri-hcn-portmap", set); err == nil || !strings.Contains(out, name) {
			t.Errorf("%s: %v\n%s", set, err, out)
		}
	}
}

func defaultOf(t *testing.T, key string) any { return flatten(t, config.Default())[key] }

// flatten is cfg as key -> value, by the toml tags.
func flatten(t *testing.T, cfg config.Config) map[string]any {
	t.Helper()
	out := map[string]any{}
	cv := reflect.ValueOf(cfg)
	for i := range cv.NumField() {
		sec := cv.Type().Field(i).Tag.Get("toml")
		sv := cv.Field(i)
		for j := range sv.NumField() {
			name := strings.Split(sv.Type().Field(j).Tag.Get("toml"), ",")[0]
			v := sv.Field(j).Interface()
			if d, ok := v.(config.Duration); ok {
				v = d.Duration.String()
			}
			out[sec+"."+name] = v
		}
	}
	return out
}

// Issue 32: the chart's operator values reach the DaemonSet: pull
// secrets, affinity, the update strategy, the ServiceAccount's name and
// annotations (or one that exists), extra arguments and environment, and
// the metrics port's firewall rule, added by the plugin's pod and removed
// by the cleanup.
func TestChartOperatorValues(t *testing.T) {
	o := decodeAll(t, render(t, "nri-hcn-portmap", "imagePullSecrets[0].name=regcred",
		"affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=pool",
		"affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=Exists",
		"updateStrategy.rollingUpdate.maxUnavailable=25%", "serviceAccount.name=portmap", "serviceAccount.annotations.team=net",
		"extraArgs={--log-level,debug}", "extraEnv[0].name=GODEBUG", "extraEnv[0].value=x509negativeserial=1", "metrics.firewallRule=true"))
	spec := o.daemonSets[0].Spec.Template.Spec
	c := spec.Containers[0]
	if len(spec.ImagePullSecrets) != 1 || spec.ImagePullSecrets[0].Name != "regcred" {
		t.Errorf("imagePullSecrets %+v", spec.ImagePullSecrets)
	}
	if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil {
		t.Errorf("affinity %+v", spec.Affinity)
	}
	if u := o.daemonSets[0].Spec.UpdateStrategy; u.RollingUpdate == nil || u.RollingUpdate.MaxUnavailable.String() != "25%" {
		t.Errorf("updateStrategy %+v", u)
	}
	if spec.ServiceAccountName != "portmap" || o.serviceAccounts[0].Name != "portmap" || o.serviceAccounts[0].Annotations["team"] != "net" ||
		o.bindings[0].Subjects[0].Name != "portmap" {
		t.Errorf("ServiceAccount %q, %+v, bound %+v", spec.ServiceAccountName, o.serviceAccounts[0].ObjectMeta, o.bindings[0].Subjects)
	}
	if !slices.Equal(c.Args[len(c.Args)-2:], []string{"--log-level", "debug"}) || !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "GODEBUG" && e.Value == "x509negativeserial=1"
	}) {
		t.Errorf("args %v, env %+v", c.Args, c.Env)
	}
	if len(spec.InitContainers) != 2 || !strings.Contains(strings.Join(spec.InitContainers[1].Command, " "),
		"New-NetFirewallRule -Name 'nri-hcn-portmap-metrics' -DisplayName 'nri-hcn-portmap metrics' -Direction Inbound -Protocol TCP -LocalPort 9467 -Action Allow") {
		t.Errorf("init containers %+v: want the firewall rule for 9467", spec.InitContainers)
	}
	cleanup := decodeAll(t, render(t, "nri-hcn-portmap", "daemonset.enabled=false", "cleanup.enabled=true", "metrics.firewallRule=true")).daemonSets[0]
	if args := strings.Join(cleanup.Spec.Template.Spec.Containers[0].Args, " "); !strings.Contains(args, "Remove-NetFirewallRule -Name 'nri-hcn-portmap-metrics'") {
		t.Errorf("cleanup %q does not remove the firewall rule", args)
	}
	// a ServiceAccount that exists: none rendered, the named one bound
	byName := decodeAll(t, render(t, "nri-hcn-portmap", "serviceAccount.create=false", "serviceAccount.name=existing"))
	if len(byName.serviceAccounts) != 0 || byName.bindings[0].Subjects[0].Name != "existing" ||
		byName.daemonSets[0].Spec.Template.Spec.ServiceAccountName != "existing" {
		t.Errorf("serviceAccount.create=false: %d ServiceAccounts, bound %+v", len(byName.serviceAccounts), byName.bindings[0].Subjects)
	}
	if out, err := renderErr(t, "nri-hcn-portmap", "serviceAccount.create=false"); err == nil || !strings.Contains(out, "serviceAccount.name") {
		t.Errorf("serviceAccount.create=false without a name: %v %s", err, out)
	}
}
