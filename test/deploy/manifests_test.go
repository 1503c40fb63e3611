// Package deploy checks the deployment manifests: the Helm chart under
// deploy/helm is rendered with a real helm for default and non-default
// values, every object is decoded strictly into the Kubernetes API types and
// the fields that matter are checked (the ConfigMap holds a configuration
// the plugin accepts, the probes find the plugin through it), and the
// kustomize manifests must be exactly what the chart renders.
package deploy

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

const (
	chart       = "../../deploy/helm/nri-hcn-portmap"
	kustomize   = "../../deploy/kustomize"
	kubeVersion = "1.30.0"
	// vapAPI is what an API server with ValidatingAdmissionPolicy lists
	// (1.30+), as make manifests tells helm
	vapAPI = "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy"
	// what an API server with the Prometheus Operator's CRDs lists
	podMonitorAPI     = "monitoring.coreos.com/v1/PodMonitor"
	serviceMonitorAPI = "monitoring.coreos.com/v1/ServiceMonitor"
	appVersion        = "0.1.0" // Chart.yaml
)

// helmBin is the helm that `make helm` installs ($HELM_BIN), or one on PATH.
// Without it the test fails: the chart is the source of every manifest.
func helmBin(t *testing.T) string {
	return tool(t, "HELM_BIN", "helm", "run `make helm` (go install helm.sh/helm/v3/cmd/helm)")
}

// tool is harness.Tool, the test failing without it.
func tool(t *testing.T, env, name, how string) string {
	t.Helper()
	p, err := harness.Tool(env, name, how)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// render runs helm template as `make manifests` does.
func render(t *testing.T, release string, set ...string) []byte {
	t.Helper()
	out, err := renderErr(t, release, set...)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(out)
}

// renderErr is render's output, or its error with helm's stderr.
func renderErr(t *testing.T, release string, set ...string) (string, error) {
	t.Helper()
	ns := "nri-hcn-portmap"
	for _, s := range set {
		if n, ok := strings.CutPrefix(s, "--namespace="); ok {
			ns = n
		}
	}
	args := []string{"template", release, chart, "--namespace", ns, "--kube-version", kubeVersion, "--api-versions", vapAPI}
	for _, s := range set {
		if strings.HasPrefix(s, "--namespace=") {
			continue
		}
		if file, ok := strings.CutPrefix(s, "--values-file="); ok {
			args = append(args, "--values", file)
			continue
		}
		if tmpl, ok := strings.CutPrefix(s, "--show-only="); ok {
			args = append(args, "--show-only", tmpl)
			continue
		}
		if api, ok := strings.CutPrefix(s, "--api-versions="); ok {
			args = append(args, "--api-versions", api)
			continue
		}
		args = append(args, "--set", s)
	}
	var stderr bytes.Buffer
	cmd := exec.Command(helmBin(t), args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return stderr.String(), fmt.Errorf("helm %v: %w\n%s", args, err, stderr.String())
	}
	return string(out), nil
}

// objects decodes a rendered stream strictly, by kind.
type objects struct {
	namespaces      []corev1.Namespace
	configMaps      []corev1.ConfigMap
	daemonSets      []appsv1.DaemonSet
	serviceAccounts []corev1.ServiceAccount
	clusterRoles    []rbacv1.ClusterRole
	bindings        []rbacv1.ClusterRoleBinding
	services        []corev1.Service
	monitors        []monitor // PodMonitor and ServiceMonitor (Prometheus Operator)
	policies        []admissionv1.ValidatingAdmissionPolicy
	policyBindings  []admissionv1.ValidatingAdmissionPolicyBinding
}

// monitor is the part of a Prometheus Operator PodMonitor or
// ServiceMonitor the chart sets (decoded strictly: a misspelt field fails).
type monitor struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Selector            metav1.LabelSelector `json:"selector"`
		PodMetricsEndpoints []monitorEndpoint    `json:"podMetricsEndpoints,omitempty"`
		Endpoints           []monitorEndpoint    `json:"endpoints,omitempty"`
	} `json:"spec"`
}

type monitorEndpoint struct {
	Port        string `json:"port"`
	Path        string `json:"path"`
	Interval    string `json:"interval"`
	Relabelings []struct {
		SourceLabels []string `json:"sourceLabels"`
		TargetLabel  string   `json:"targetLabel"`
	} `json:"relabelings"`
}

func decodeAll(t *testing.T, stream []byte) objects {
	t.Helper()
	var o objects
	for _, doc := range strings.Split(string(stream), "\n---\n") {
		var head struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		switch head.Kind {
		case "":
		case "Namespace":
			o.namespaces = appendStrict(t, o.namespaces, head.Kind, doc)
		case "ConfigMap":
			o.configMaps = appendStrict(t, o.configMaps, head.Kind, doc)
		case "DaemonSet":
			o.daemonSets = appendStrict(t, o.daemonSets, head.Kind, doc)
		case "ServiceAccount":
			o.serviceAccounts = appendStrict(t, o.serviceAccounts, head.Kind, doc)
		case "ClusterRole":
			o.clusterRoles = appendStrict(t, o.clusterRoles, head.Kind, doc)
		case "ClusterRoleBinding":
			o.bindings = appendStrict(t, o.bindings, head.Kind, doc)
		case "Service":
			o.services = appendStrict(t, o.services, head.Kind, doc)
		case "ValidatingAdmissionPolicy":
			o.policies = appendStrict(t, o.policies, head.Kind, doc)
		case "ValidatingAdmissionPolicyBinding":
			o.policyBindings = appendStrict(t, o.policyBindings, head.Kind, doc)
		case "PodMonitor", "ServiceMonitor":
			o.monitors = appendStrict(t, o.monitors, head.Kind, doc)
		default:
			t.Fatalf("unexpected kind %s", head.Kind)
		}
	}
	return o
}

// appendStrict decodes one manifest of kind strictly (an unknown field is
// an error) and appends it to list.
func appendStrict[T any](t *testing.T, list []T, kind, doc string) []T {
	t.Helper()
	var v T
	if err := yaml.UnmarshalStrict([]byte(doc), &v); err != nil {
		t.Fatalf("%s: %v", kind, err)
	}
	return append(list, v)
}

// The kustomize manifests are the chart's rendering, byte for byte, as
// hack/kustomize splits it (make manifests): the base without its
// ConfigMap (config.toml, generated), the admission policies as a
// component, the cleanup DaemonSet.
func TestKustomizeManifestsAreRenderedFromTheChart(t *testing.T) {
	out := t.TempDir()
	for _, tt := range []struct {
		set  []string
		args []string
	}{
		{nil, nil},
		{[]string{"daemonset.enabled=false", "cleanup.enabled=true", "--show-only=templates/cleanup.yaml"}, []string{"-cleanup"}},
		{[]string{"daemonset.enabled=false", "serviceNodes.enabled=true"}, []string{"-service-nodes"}},
	} {
		cmd := exec.Command("go", append([]string{"run", "../../hack/kustomize", "-out", out}, tt.args...)...)
		cmd.Stdin = bytes.NewReader(render(t, "nri-hcn-portmap", tt.set...))
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("hack/kustomize: %v\n%s", err, b)
		}
	}
	for _, file := range []string{"base/nri-hcn-portmap.yaml", "base/config.toml", "components/admission-policies/admission-policies.yaml",
		"cleanup/nri-hcn-portmap-cleanup.yaml", "service-nodes/service-nodes.yaml"} {
		got, err := os.ReadFile(filepath.Join(kustomize, file))
		if err != nil {
			t.Fatal(err)
		}
		if want, err := os.ReadFile(filepath.Join(out, file)); err != nil || !bytes.Equal(got, want) {
			t.Errorf("deploy/kustomize/%s differs from the chart's rendering (%v): run `make manifests`", file, err)
		}
	}
	// what the kustomizations make of them: kustomize_test.go
}

// TestChartDefaults: what `helm install` with no values gives: no
// namespace object (the operator's, created with the Pod Security label),
// the Windows defaults, admin on loopback, metrics on every address of the
// node at 9467 with scrape annotations, and the standard labels with the
// release in the selector.
func TestChartDefaults(t *testing.T) {
	o := decodeAll(t, render(t, "nri-hcn-portmap"))
	if len(o.namespaces) != 0 {
		t.Errorf("the chart renders namespaces %v: the release namespace is the operator's (helm/helm 6794)", o.namespaces)
	}
	cfg := configOf(t, o)
	if cfg.HCN.Backend != config.BackendWindows || cfg.Containerd.Address != `\\.\pipe\containerd-containerd` || cfg.HCN.Network != "nat" {
		t.Errorf("backend %q, containerd %q, network %q: want the Windows defaults", cfg.HCN.Backend, cfg.Containerd.Address, cfg.HCN.Network)
	}
	if cfg.Log.File != "" || !strings.HasPrefix(cfg.Admin.Listen, "127.0.0.1:") || cfg.Admin.MetricsListen != ":9467" {
		t.Errorf("log.file %q, admin.listen %q, admin.metrics_listen %q: logs to stdout, admin on loopback, metrics on :9467",
			cfg.Log.File, cfg.Admin.Listen, cfg.Admin.MetricsListen)
	}
	if !slices.Equal(cfg.Plugin.MappingSources, []string{"annotations", "cri"}) {
		t.Errorf("mapping sources %v: hostPort is on by default", cfg.Plugin.MappingSources)
	}
	if len(o.daemonSets) != 1 {
		t.Fatalf("%d DaemonSets, want the plugin's", len(o.daemonSets))
	}
	ds := o.daemonSets[0]
	checkPluginDaemonSet(t, ds, "ghcr.io/nri-hcn-portmap/nri-hcn-portmap:"+appVersion) // the release workflow publishes it there
	checkStandardLabels(t, "nri-hcn-portmap", ds.Labels, ds.Spec.Selector.MatchLabels)
	ann := ds.Spec.Template.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != "9467" || ann["prometheus.io/path"] != "/metrics" {
		t.Errorf("pod annotations %v: want Prometheus' scrape annotations for port 9467", ann)
	}
	c := ds.Spec.Template.Spec.Containers[0]
	if len(c.Ports) != 1 || c.Ports[0].Name != "metrics" || c.Ports[0].ContainerPort != 9467 {
		t.Errorf("container ports %+v: want metrics 9467", c.Ports)
	}
	for _, obj := range []metav1.ObjectMeta{o.configMaps[0].ObjectMeta, o.serviceAccounts[0].ObjectMeta, o.clusterRoles[0].ObjectMeta, o.bindings[0].ObjectMeta} {
		checkStandardLabels(t, "nri-hcn-portmap", obj.Labels, nil)
	}
	if len(o.services)+len(o.monitors) != 0 {
		t.Errorf("a Service or monitor by default: %v %v", o.services, o.monitors)
	}
}

// checkStandardLabels: Helm's and Kubernetes' recommended labels, and the
// release in the selector (two releases must not select each other's pods).
func checkStandardLabels(t *testing.T, release string, got, selector map[string]string) {
	t.Helper()
	for k, v := range map[string]string{"app.kubernetes.io/name": "nri-hcn-portmap", "app.kubernetes.io/instance": release,
		"app.kubernetes.io/version": appVersion, "app.kubernetes.io/managed-by": "Helm", "helm.sh/chart": "nri-hcn-portmap-" + appVersion} {
		if got[k] != v {
			t.Errorf("label %s = %q, want %q (in %v)", k, got[k], v, got)
		}
	}
	if selector != nil && (selector["app.kubernetes.io/instance"] != release || selector["app.kubernetes.io/name"] != "nri-hcn-portmap") {
		t.Errorf("selector %v: want name and instance", selector)
	}
}

// Issue 48: the image as operators write it: a registry (the global one
// over the chart's), a repository, a tag or a digest; a repository that
// begins with a registry of its own is refused naming the split, not put
// behind another registry.
func TestChartImage(t *testing.T) {
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name string
		set  []string
		want string // the image, or what the refusal says
	}{
		{"the default", nil, "ghcr.io/nri-hcn-portmap/nri-hcn-portmap:" + appVersion},
		{"a private registry", []string{"image.registry=registry.example:5000"}, "registry.example:5000/nri-hcn-portmap/nri-hcn-portmap:" + appVersion},
		{"the global registry wins", []string{"image.registry=registry.example", "global.imageRegistry=mirror.example"},
			"mirror.example/nri-hcn-portmap/nri-hcn-portmap:" + appVersion},
		{"a digest", []string{"image.tag=9.9.9", "image.digest=" + digest}, "ghcr.io/nri-hcn-portmap/nri-hcn-portmap@" + digest},
		{"the whole name, no registry", []string{"image.registry=", "image.repository=registry.example/team/nri-hcn-portmap"},
			"registry.example/team/nri-hcn-portmap:" + appVersion},
		{"a registry in the repository", []string{"image.repository=registry.example/nri-hcn-portmap"},
			"set image.registry=registry.example and image.repository=nri-hcn-portmap"},
		{"a digest of no form", []string{"image.digest=abc"}, `image.digest = "abc": empty, or the image's digest`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := renderErr(t, "nri-hcn-portmap", tc.set...)
			if strings.Contains(tc.want, " ") {
				if err == nil || !strings.Contains(out, tc.want) {
					t.Fatalf("helm template: %v, want refused saying %q:\n%s", err, tc.want, out)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			o := decodeAll(t, []byte(out))
			for _, ds := range o.daemonSets {
				for _, c := range append(ds.Spec.Template.Spec.InitContainers, ds.Spec.Template.Spec.Containers...) {
					if c.Image != tc.want {
						t.Errorf("%s %s: image %q, want %q", ds.Name, c.Name, c.Image, tc.want)
					}
				}
			}
		})
	}
}

// Issue 48: deploy/Dockerfile's example tags the image as the release
// workflow does and the chart pulls it: the appVersion, without the v of
// the release's tag, under the chart's repository.
func TestTheDockerfileTagsTheImageAsTheChartPullsIt(t *testing.T) {
	b, err := os.ReadFile("../../deploy/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`VERSION=(v\S+)[\s\S]*-t REGISTRY/(\S+):(\S+) `).FindStringSubmatch(string(b))
	if m == nil {
		t.Fatal("deploy/Dockerfile shows no docker buildx build with VERSION and -t REGISTRY/NAME:TAG")
	}
	if m[1] != "v"+appVersion || m[3] != appVersion || m[2] != "nri-hcn-portmap/nri-hcn-portmap" {
		t.Errorf("deploy/Dockerfile builds VERSION=%s as REGISTRY/%s:%s; the chart pulls REGISTRY/nri-hcn-portmap/nri-hcn-portmap:%s", m[1], m[2], m[3], appVersion)
	}
}

func TestChartValues(t *testing.T) {
	o := decodeAll(t, render(t, "nri-hcn-portmap", "image.registry=registry.example", "image.repository=nri-hcn-portmap", "image.tag=v9.9.9",
		"config.network=l2bridge-net", "config.logLevel=debug", "config.admission.namespaces={ingress,kube-system}",
		"config.admission.hostPortRanges={80,443,30000-32767}", "metrics.enabled=false"))
	cfg := configOf(t, o)
	if cfg.HCN.Network != "l2bridge-net" || cfg.Log.Level != "debug" ||
		!slices.Equal(cfg.Admission.Namespaces, []string{"ingress", "kube-system"}) ||
		!slices.Equal(cfg.Admission.HostPortRanges, []string{"80", "443", "30000-32767"}) {
		t.Errorf("config %+v does not carry the values", cfg)
	}
	if cfg.Admin.MetricsListen != "" || len(o.daemonSets[0].Spec.Template.Spec.Containers[0].Ports) != 0 ||
		o.daemonSets[0].Spec.Template.Annotations["prometheus.io/scrape"] != "" {
		t.Errorf("metrics.enabled=false still listens or annotates: %q %+v", cfg.Admin.MetricsListen, o.daemonSets[0].Spec.Template)
	}
	checkPluginDaemonSet(t, o.daemonSets[0], "registry.example/nri-hcn-portmap:v9.9.9")
	// a changed configuration rolls the pods: the plugin reads it at start
	sum := func(o objects) string { return o.daemonSets[0].Spec.Template.Annotations["checksum/config"] }
	if def := decodeAll(t, render(t, "nri-hcn-portmap")); sum(def) == "" || sum(def) == sum(o) {
		t.Errorf("checksum/config %q with the defaults, %q with other config: want it set and changed", sum(def), sum(o))
	}
	// another release name: its own object names and selector
	other := decodeAll(t, render(t, "canary"))
	if ds := other.daemonSets[0]; ds.Name != "canary-nri-hcn-portmap" || configMapOf(ds) != other.configMaps[0].Name ||
		other.clusterRoles[0].Name != "canary-nri-hcn-portmap" || ds.Spec.Template.Spec.ServiceAccountName != other.serviceAccounts[0].Name {
		t.Errorf("release canary: DaemonSet %s, ConfigMap %s, ClusterRole %s: want canary-nri-hcn-portmap throughout",
			ds.Name, other.configMaps[0].Name, other.clusterRoles[0].Name)
	}
	checkStandardLabels(t, "canary", other.daemonSets[0].Labels, other.daemonSets[0].Spec.Selector.MatchLabels)
}

// TestChartMonitors: the optional PodMonitor selects the plugin's pods and
// their metrics port; the optional ServiceMonitor, a headless Service that
// selects them.
func TestChartMonitors(t *testing.T) {
	o := decodeAll(t, render(t, "nri-hcn-portmap", "metrics.podMonitor.enabled=true", "metrics.serviceMonitor.enabled=true",
		"metrics.podMonitor.labels.release=prometheus", "--api-versions="+podMonitorAPI, "--api-versions="+serviceMonitorAPI))
	if len(o.monitors) != 2 || len(o.services) != 1 {
		t.Fatalf("%d monitors, %d services: want a PodMonitor, a ServiceMonitor and its Service", len(o.monitors), len(o.services))
	}
	pods := labels.Set(o.daemonSets[0].Spec.Template.Labels)
	svc := o.services[0]
	if svc.Spec.ClusterIP != "None" || !labels.SelectorFromSet(svc.Spec.Selector).Matches(pods) ||
		len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.StrVal != "metrics" {
		t.Errorf("Service %+v: want headless, selecting the plugin's pods, port metrics", svc.Spec)
	}
	for _, m := range o.monitors {
		sel, err := metav1.LabelSelectorAsSelector(&m.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		eps, target := m.Spec.PodMetricsEndpoints, pods
		if m.Kind == "ServiceMonitor" {
			eps, target = m.Spec.Endpoints, labels.Set(svc.Labels)
		}
		if m.APIVersion != "monitoring.coreos.com/v1" || !sel.Matches(target) || len(eps) != 1 || eps[0].Port != "metrics" || eps[0].Path != "/metrics" {
			t.Errorf("%s %+v does not select the plugin's metrics", m.Kind, m)
		}
		// instance and node are the node's name (the alerts name it, and
		// join kube-state-metrics' node labels on it), not its IP:port
		set := map[string]string{}
		for _, r := range eps[0].Relabelings {
			set[r.TargetLabel] = strings.Join(r.SourceLabels, ",")
		}
		if set["instance"] != "__meta_kubernetes_pod_node_name" || set["node"] != "__meta_kubernetes_pod_node_name" {
			t.Errorf("%s relabelings %+v: want instance and node from __meta_kubernetes_pod_node_name", m.Kind, eps[0].Relabelings)
		}
		// issue 48: every label the alerts find the plugin's targets by is
		// one the relabelings set, from the pods' own label of that name
		// with the value the rules select
		for name, value := range alertSelectors(t) {
			pod, ok := strings.CutPrefix(set[name], "__meta_kubernetes_pod_label_")
			if !ok || pods[strings.NewReplacer("app_kubernetes_io_", "app.kubernetes.io/").Replace(pod)] != value {
				t.Errorf("%s: the alerts select up{%s=%q}; the relabelings set %s from %q, the pods' labels are %v", m.Kind, name, value, name, set[name], pods)
			}
		}
		if m.Kind == "PodMonitor" && m.Metadata.Labels["release"] != "prometheus" {
			t.Errorf("PodMonitor labels %v: want the extra label", m.Metadata.Labels)
		}
	}
}

// TestChartSchema: values.schema.json makes a wrong type or an unknown key
// fail helm template and helm lint, naming the value; the chart lints clean.
func TestChartSchema(t *testing.T) {
	for _, tt := range []struct{ set, want string }{
		{"metrics.port=abc", "at '/metrics/port': got string, want integer"},
		{"config.createNetwork=yes", "at '/config/createNetwork': got string, want boolean"},
		{"image.pullPolicy=Sometimes", "at '/image/pullPolicy'"},
		{"config.logLevel=verbose", "at '/config/logLevel'"},
		{"metric.port=9467", "additional properties 'metric' not allowed"},
		{"config.mappingSources={annotations,hostport}", "at '/config/mappingSources/1'"},
	} {
		t.Run(tt.set, func(t *testing.T) {
			for _, cmd := range [][]string{
				{"template", "x", chart, "--namespace", "nri-hcn-portmap", "--kube-version", kubeVersion, "--set", tt.set},
				{"lint", chart, "--namespace", "nri-hcn-portmap", "--set", tt.set},
			} {
				out, err := exec.Command(helmBin(t), cmd...).CombinedOutput()
				if err == nil || !strings.Contains(string(out), tt.want) {
					t.Errorf("helm %v: %v\n%s\nwant a failure saying %q", cmd, err, out, tt.want)
				}
			}
		})
	}
	// issue 48: nothing to say either (helm's [INFO] asks for an icon,
	// which Chart.yaml lacked)
	out, err := exec.Command(helmBin(t), "lint", "--strict", chart, "--namespace", "nri-hcn-portmap").CombinedOutput()
	if err != nil || strings.Contains(string(out), "[WARNING]") || strings.Contains(string(out), "[ERROR]") || strings.Contains(string(out), "[INFO]") {
		t.Errorf("helm lint: %v\n%s", err, out)
	}
	var meta struct {
		Home, Icon  string
		Sources     []string
		Keywords    []string
		Maintainers []struct{ Name, URL string }
	}
	b, err := os.ReadFile(filepath.Join(chart, "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &meta); err != nil || meta.Home == "" || len(meta.Sources) == 0 || len(meta.Keywords) == 0 || len(meta.Maintainers) == 0 {
		t.Errorf("Chart.yaml %+v (%v): want home, sources, keywords and maintainers", meta, err)
	}
	icon, ok := strings.CutPrefix(meta.Icon, "https://raw.githubusercontent.com/nri-hcn-portmap/nri-hcn-portmap/main/")
	if _, err := os.Stat(filepath.Join("../..", icon)); !ok || err != nil {
		t.Errorf("Chart.yaml's icon %q: not a file of this repository on main", meta.Icon)
	}
}

// TestChartRBAC: the DaemonSet reports to the API server under its own
// ServiceAccount, with the node name from the downward API and least
// privilege: pods get, pods/status patch, events.k8s.io events create,
// namespaces get/list/watch; nothing else. kubernetes.enabled=false renders none of it.
func TestChartRBAC(t *testing.T) {
	o := decodeAll(t, render(t, "nri-hcn-portmap"))
	if cfg := configOf(t, o); !cfg.Kubernetes.Enabled || cfg.Kubernetes.Kubeconfig != "" {
		t.Errorf("kubernetes %+v: want enabled, in-cluster", cfg.Kubernetes)
	}
	if len(o.serviceAccounts) != 1 || len(o.clusterRoles) != 1 || len(o.bindings) != 1 {
		t.Fatalf("RBAC objects: %d ServiceAccounts, %d ClusterRoles, %d bindings", len(o.serviceAccounts), len(o.clusterRoles), len(o.bindings))
	}
	sa, role, b := o.serviceAccounts[0], o.clusterRoles[0], o.bindings[0]
	// no get on pods (issue 37): a stolen token reads no pod's spec
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods/status"}, Verbs: []string{"patch"}},
		{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create"}},
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}},                // Pod Security labels
		{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"list", "watch"}}, // issue 52
	}
	if !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("ClusterRole rules %+v, want exactly %+v", role.Rules, want)
	}
	if b.RoleRef.Name != role.Name || len(b.Subjects) != 1 || b.Subjects[0].Name != sa.Name || b.Subjects[0].Namespace != sa.Namespace {
		t.Errorf("binding %+v does not bind %s to %s/%s", b, role.Name, sa.Namespace, sa.Name)
	}
	spec := o.daemonSets[0].Spec.Template.Spec
	if spec.ServiceAccountName != sa.Name || spec.AutomountServiceAccountToken == nil || !*spec.AutomountServiceAccountToken {
		t.Errorf("DaemonSet runs as %q, automount %v", spec.ServiceAccountName, spec.AutomountServiceAccountToken)
	}
	env := spec.Containers[0].Env
	i := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == "NODE_NAME" })
	if len(env) != 2 || configMapOf(o.daemonSets[0]) == "" || i < 0 || env[i].ValueFrom == nil || env[i].ValueFrom.FieldRef == nil ||
		env[i].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("env %+v: want the configuration and NODE_NAME from spec.nodeName", env)
	}
	// without the API server the annotation's Pod Security cannot be
	// checked: the chart says so (helm template and helm lint --strict),
	// unless the check is off
	if out, err := renderErr(t, "nri-hcn-portmap", "kubernetes.enabled=false"); err == nil ||
		!strings.Contains(out, "config.admission.podSecurity=enforce needs kubernetes.enabled=true") {
		t.Errorf("kubernetes.enabled=false with Pod Security enforced: %v\n%s", err, out)
	}
	if out, err := exec.Command(helmBin(t), "lint", "--strict", chart, "--namespace", "nri-hcn-portmap", "--set", "kubernetes.enabled=false").CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "config.admission.podSecurity=enforce needs kubernetes.enabled=true") {
		t.Errorf("helm lint --strict, kubernetes.enabled=false with Pod Security enforced: %v\n%s", err, out)
	}
	// nor can the NetworkPolicies that may isolate a pod (issue 52)
	for _, how := range []string{"template", "lint"} {
		args := []string{"kubernetes.enabled=false", "config.admission.podSecurity=off"}
		var out []byte
		var err error
		if how == "template" {
			var s string
			s, err = renderErr(t, "nri-hcn-portmap", args...)
			out = []byte(s)
		} else {
			out, err = exec.Command(helmBin(t), "lint", "--strict", chart, "--namespace", "nri-hcn-portmap", "--set", args[0], "--set", args[1]).CombinedOutput()
		}
		if err == nil || !strings.Contains(string(out), "config.admission.networkPolicy=kubernetes needs kubernetes.enabled=true") {
			t.Errorf("helm %s, kubernetes.enabled=false with NetworkPolicy checked: %v\n%s", how, err, out)
		}
	}
	if o := decodeAll(t, render(t, "nri-hcn-portmap", "config.admission.networkPolicy=off")); !reflect.DeepEqual(o.clusterRoles[0].Rules, want[:3]) {
		t.Errorf("config.admission.networkPolicy=off: rules %+v, want no read of NetworkPolicies", o.clusterRoles[0].Rules)
	}
	off := decodeAll(t, render(t, "nri-hcn-portmap", "kubernetes.enabled=false", "config.admission.podSecurity=off", "config.admission.networkPolicy=off"))
	if len(off.serviceAccounts)+len(off.clusterRoles)+len(off.bindings) != 0 || configOf(t, off).Kubernetes.Enabled {
		t.Errorf("kubernetes.enabled=false still renders RBAC or enables reporting")
	}
	if a := off.daemonSets[0].Spec.Template.Spec.AutomountServiceAccountToken; a == nil || *a {
		t.Errorf("kubernetes.enabled=false: automount %v, want false", a)
	}
}

func TestChartCleanup(t *testing.T) {
	o := decodeAll(t, render(t, "nri-hcn-portmap", "daemonset.enabled=false", "cleanup.enabled=true"))
	if len(o.daemonSets) != 1 || o.daemonSets[0].Name != "nri-hcn-portmap-cleanup" {
		t.Fatalf("DaemonSets %d: want the cleanup one only", len(o.daemonSets))
	}
	configOf(t, o) // it runs with the same, valid, configuration
	ds := o.daemonSets[0]
	checkHostProcess(t, ds)
	if a := ds.Spec.Template.Spec.AutomountServiceAccountToken; a == nil || *a || ds.Spec.Template.Spec.ServiceAccountName != "" {
		t.Error("cleanup calls no Kubernetes API: no service account token may be mounted")
	}
	c := ds.Spec.Template.Spec.Containers[0]
	if !strings.Contains(strings.Join(c.Args, " "), `nri-hcn-portmap.exe cleanup`) {
		t.Errorf("cleanup container runs %v %v", c.Command, c.Args)
	}
	checkConfigFromEnv(t, ds)
}

func configOf(t *testing.T, o objects) config.Config {
	t.Helper()
	if len(o.configMaps) != 1 {
		t.Fatalf("%d ConfigMaps", len(o.configMaps))
	}
	body, ok := o.configMaps[0].Data["config.toml"]
	if !ok {
		t.Fatal("the ConfigMap has no config.toml")
	}
	cfg := config.Default()
	if err := config.Decode("ConfigMap config.toml", []byte(body), &cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.ValidateOn("ConfigMap config.toml", nil, "windows"); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func checkHostProcess(t *testing.T, ds appsv1.DaemonSet) {
	t.Helper()
	spec := ds.Spec.Template.Spec
	if spec.NodeSelector["kubernetes.io/os"] != "windows" {
		t.Errorf("nodeSelector %v: must select Windows nodes", spec.NodeSelector)
	}
	sc := spec.SecurityContext
	if sc == nil || sc.WindowsOptions == nil || sc.WindowsOptions.HostProcess == nil || !*sc.WindowsOptions.HostProcess {
		t.Fatal("the pod must be a HostProcess pod")
	}
	if sc.WindowsOptions.RunAsUserName == nil || *sc.WindowsOptions.RunAsUserName != `NT AUTHORITY\SYSTEM` {
		t.Errorf("runAsUserName %v: HNS and containerd's pipe need SYSTEM", sc.WindowsOptions.RunAsUserName)
	}
	if !spec.HostNetwork {
		t.Error("HostProcess pods must use hostNetwork")
	}
	for k, v := range ds.Spec.Selector.MatchLabels {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("selector %v does not match template labels %v", ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels)
		}
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
}

// checkConfigFromEnv: the container takes the configuration from the
// environment variable the plugin reads (config.ConfigEnv), which kubelet
// resolves from the release's ConfigMap, and mounts nothing: no file, and
// no link a local user could re-point, stands between them (issue 53).
func checkConfigFromEnv(t *testing.T, ds appsv1.DaemonSet) {
	t.Helper()
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	if name := configMapOf(ds); name != strings.TrimSuffix(ds.Name, "-cleanup") {
		t.Fatalf("env %+v: want %s from the %s ConfigMap's config.toml", c.Env, config.ConfigEnv, strings.TrimSuffix(ds.Name, "-cleanup"))
	}
	if len(c.VolumeMounts) != 0 || len(spec.Volumes) != 0 {
		t.Errorf("volumes %+v mounted at %+v: the configuration needs none", spec.Volumes, c.VolumeMounts)
	}
	for _, args := range [][]string{c.Command, c.Args} {
		if strings.Contains(strings.Join(args, " "), "--config") {
			t.Errorf("command %v %v names a configuration file", c.Command, c.Args)
		}
	}
}

// configMapOf is the ConfigMap whose config.toml the DaemonSet's container
// takes in its environment ("" none).
func configMapOf(ds appsv1.DaemonSet) string {
	c := ds.Spec.Template.Spec.Containers[0]
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == config.ConfigEnv })
	if i < 0 || c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.ConfigMapKeyRef == nil || c.Env[i].ValueFrom.ConfigMapKeyRef.Key != "config.toml" {
		return ""
	}
	return c.Env[i].ValueFrom.ConfigMapKeyRef.Name
}

func checkPluginDaemonSet(t *testing.T, ds appsv1.DaemonSet, image string) {
	t.Helper()
	checkHostProcess(t, ds)
	c := ds.Spec.Template.Spec.Containers[0]
	if c.Image != image {
		t.Errorf("image %q, want %q", c.Image, image)
	}
	if !slices.Contains(c.Command, `%CONTAINER_SANDBOX_MOUNT_POINT%\nri-hcn-portmap.exe`) || len(c.Args) != 1 || c.Args[0] != "run" {
		t.Fatalf("container %s: command %v args %v", c.Name, c.Command, c.Args)
	}
	checkConfigFromEnv(t, ds)
	// the probes find the plugin through the same configuration, the
	// container's environment (so a changed admin.listen moves them too);
	// liveness asks only /livez
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.Exec == nil || len(p.Exec.Command) < 2 || p.Exec.Command[1] != "health" {
			t.Errorf("%s probe %+v: want `nri-hcn-portmap.exe health`", name, p)
			continue
		}
		if slices.Contains(p.Exec.Command, "--admin-listen") {
			t.Errorf("%s probe %v hard-codes the admin address", name, p.Exec.Command)
		}
		if live := slices.Contains(p.Exec.Command, "--live"); live != (name == "liveness") {
			t.Errorf("%s probe %v: --live is for liveness only", name, p.Exec.Command)
		}
	}
	if c.Resources.Limits.Memory().IsZero() {
		t.Error("no memory limit")
	}
}

// Issue 55: the DaemonSet's pod refuses a node where the plugin's Windows
// service is installed: its first init step runs `service absent` with
// the plugin's own image and executable (cmd/nri-hcn-portmap/service's
// tests hold what it says, on a fake SCM and on wine's).
func TestTheDaemonSetsFirstStepRefusesANodeWithTheService(t *testing.T) {
	for _, set := range [][]string{nil, {"metrics.firewallRule=true"}} {
		o := decodeAll(t, render(t, "nri-hcn-portmap", set...))
		if len(o.daemonSets) != 1 {
			t.Fatalf("%v: %d DaemonSets", set, len(o.daemonSets))
		}
		spec := o.daemonSets[0].Spec.Template.Spec
		if len(spec.InitContainers) == 0 {
			t.Fatalf("%v: no init step", set)
		}
		first, plugin := spec.InitContainers[0], spec.Containers[0]
		if first.Name != "no-service" || strings.Join(first.Args, " ") != "service absent" || first.Image != plugin.Image ||
			strings.Join(first.Command, " ") != strings.Join(plugin.Command, " ") {
			t.Errorf("%v: the first init step %+v; want the plugin's executable running service absent", set, first)
		}
	}
}
