package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"sigs.k8s.io/yaml"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

const kubeNode = "win-node-1"

// applyRBAC creates the RBAC objects of the rendered chart
// (deploy/kustomize/base): the plugin runs with exactly those rights.
func applyRBAC(t *testing.T, ctx context.Context, k *harness.Kube) {
	t.Helper()
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy/kustomize/base/nri-hcn-portmap.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// the operator's namespace, as the README creates it
	_, err = k.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "nri-hcn-portmap",
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}, metav1.CreateOptions{})
	must(t, err)
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var head struct{ Kind string }
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatal(err)
		}
		switch head.Kind {
		case "Namespace":
			var o corev1.Namespace
			must(t, yaml.Unmarshal([]byte(doc), &o))
			_, err = k.Admin.CoreV1().Namespaces().Create(ctx, &o, metav1.CreateOptions{})
		case "ServiceAccount":
			var o corev1.ServiceAccount
			must(t, yaml.Unmarshal([]byte(doc), &o))
			_, err = k.Admin.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, &o, metav1.CreateOptions{})
		case "ClusterRole":
			var o rbacv1.ClusterRole
			must(t, yaml.Unmarshal([]byte(doc), &o))
			_, err = k.Admin.RbacV1().ClusterRoles().Create(ctx, &o, metav1.CreateOptions{})
		case "ClusterRoleBinding":
			var o rbacv1.ClusterRoleBinding
			must(t, yaml.Unmarshal([]byte(doc), &o))
			_, err = k.Admin.RbacV1().ClusterRoleBindings().Create(ctx, &o, metav1.CreateOptions{})
		default:
			continue
		}
		if err != nil {
			t.Fatalf("creating the chart's %s: %v", head.Kind, err)
		}
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// kubeEnv is an events-path environment with a real API server; the
// plugin reports with the chart's ServiceAccount and RBAC.
func kubeEnv(t *testing.T) (*harness.Env, *harness.Kube, context.Context) {
	t.Helper()
	return kubeEnvWith(t, eventsConfig)
}

// kubeEnvWith is kubeEnv with the plugin's configuration but [kubernetes].
func kubeEnvWith(t *testing.T, base string) (*harness.Env, *harness.Kube, context.Context) {
	t.Helper()
	env, ctx := newEnv(t, base)
	k, err := env.StartKube(ctx)
	if err != nil {
		t.Fatal(err)
	}
	applyRBAC(t, ctx, k)
	kubeconfig, err := k.ServiceAccountKubeconfig(ctx, "nri-hcn-portmap", "nri-hcn-portmap")
	if err != nil {
		t.Fatal(err)
	}
	cfg := base + fmt.Sprintf("\n[kubernetes]\nenabled = true\nkubeconfig = %q\nnode_name = %q\n", kubeconfig, kubeNode)
	must(t, os.WriteFile(env.ConfigPath, []byte(cfg), 0o644))
	if err := env.StartPluginEvents(ctx); err != nil {
		t.Fatal(err)
	}
	return env, k, ctx
}

// podEvents lists the events.k8s.io events regarding the pod.
func podEvents(ctx context.Context, k *harness.Kube, p harness.Pod) ([]eventsv1.Event, error) {
	list, err := k.Admin.EventsV1().Events(p.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Regarding.Kind == "Pod" && e.Regarding.Name == p.Name && string(e.Regarding.UID) == p.UID {
			out = append(out, e)
		}
	}
	return out, nil
}

// wantReported waits for the pod's event (type, reason, note containing
// note; reported by the plugin on this node) and its condition
// (status, reason).
func wantReported(t *testing.T, ctx context.Context, k *harness.Kube, p harness.Pod, typ, reason, note string, status corev1.ConditionStatus, condReason string) {
	t.Helper()
	wantSaid(t, ctx, k, p, typ, reason, []string{note}, status, condReason)
}

// wantSaid is wantReported with a note that contains each of notes.
func wantSaid(t *testing.T, ctx context.Context, k *harness.Kube, p harness.Pod, typ, reason string, notes []string, status corev1.ConditionStatus, condReason string) {
	t.Helper()
	err := harness.Eventually(ctx, 20*time.Second, func() error {
		evs, err := podEvents(ctx, k, p)
		if err != nil {
			return err
		}
		found := false
		for _, e := range evs {
			says := true
			for _, n := range notes {
				says = says && strings.Contains(e.Note, n)
			}
			if e.Type == typ && e.Reason == reason && says && e.ReportingController == "hcn.nri.io/nri-hcn-portmap" && e.ReportingInstance == "nri-hcn-portmap-"+kubeNode &&
				e.Action == "MapHostPorts" {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("no %s %s event ~%q on pod %s/%s among %+v", typ, reason, notes, p.Namespace, p.Name, evs)
		}
		pod, err := k.Admin.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == "hcn.nri.io/port-mappings-ready" {
				if c.Status != status || c.Reason != condReason {
					return fmt.Errorf("condition %+v, want %s %s", c, status, condReason)
				}
				return nil
			}
		}
		return fmt.Errorf("pod %s has no hcn.nri.io/port-mappings-ready condition: %+v", p.Name, pod.Status.Conditions)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestKubernetesEventsAndCondition: what `kubectl describe pod` shows for
// each outcome, asserted against a real kube-apiserver, with the plugin
// using the chart's ServiceAccount and RBAC: a mapped pod (Normal
// PortsMapped, condition True: the readiness gate's condition), a bad
// annotation, a denied port, a conflict and a Hyper-V pod (Warning PortMappingFailed with
// the NRI path's text, condition False with the reason), HNS failing then
// recovering (False, then True), and another pod of the same name, created
// again (nothing).
func TestKubernetesEventsAndCondition(t *testing.T) {
	env, k, ctx := kubeEnv(t)
	run := func(p *harness.Pod, node string) hcn.GUID {
		t.Helper()
		if _, err := k.CreatePod(ctx, p, node, true); err != nil {
			t.Fatal(err)
		}
		return runSandbox(t, ctx, env, *p)
	}

	web := pod("kube-web", "18700:80")
	ns := run(&web, kubeNode)
	ep := wantEndpoint(t, ctx, env, web.ID, ns, []hcn.PortMappingPolicy{tcp(18700, 80, "", 1)})
	wantReported(t, ctx, k, web, "Normal", "PortsMapped", "host ports mapped by HNS endpoint "+ep.Endpoint+": *:18700->80/tcp",
		corev1.ConditionTrue, "PortsMapped")

	bad := pod("kube-bad", "18701:80/sctp")
	run(&bad, kubeNode)
	wantReported(t, ctx, k, bad, "Warning", "PortMappingFailed", "InvalidPortMappings: pod default/kube-bad: annotation hcn.nri.io/port-mappings",
		corev1.ConditionFalse, "InvalidPortMappings")

	denied := pod("kube-denied", "80:80")
	run(&denied, kubeNode)
	wantReported(t, ctx, k, denied, "Warning", "PortMappingFailed", "HostPortDenied: pod default/kube-denied", corev1.ConditionFalse, "HostPortDenied")

	clash := pod("kube-clash", "18700:81")
	run(&clash, kubeNode)
	wantReported(t, ctx, k, clash, "Warning", "PortMappingFailed", "default/kube-web", corev1.ConditionFalse, "HostPortConflict")

	hyperv := pod("kube-hyperv", "18704:80")
	hyperv.HyperV = true
	run(&hyperv, kubeNode)
	wantReported(t, ctx, k, hyperv, "Warning", "PortMappingFailed", "HyperVIsolated: pod default/kube-hyperv", corev1.ConditionFalse, "HyperVIsolated")

	// HNS fails the create (transient: retried), then succeeds
	must(t, env.SimClient.InjectFault(ctx, hcnsim.Fault{Op: hcnsim.OpCreateEndpoint, Kind: "unavailable", Count: 1}))
	flaky := pod("kube-flaky", "18702:80")
	fns := run(&flaky, kubeNode)
	wantEndpoint(t, ctx, env, flaky.ID, fns, []hcn.PortMappingPolicy{tcp(18702, 80, "", 1)})
	wantReported(t, ctx, k, flaky, "Normal", "PortsMapped", "*:18702->80/tcp", corev1.ConditionTrue, "PortsMapped")
	evs, err := podEvents(ctx, k, flaky)
	must(t, err)
	sawFailure := false
	for _, e := range evs {
		sawFailure = sawFailure || (e.Reason == "PortMappingFailed" && strings.HasPrefix(e.Note, "HNSError: "))
	}
	if !sawFailure {
		t.Errorf("the HNS failure before the recovery was not reported: %+v", evs)
	}

	// another pod of the same name (the pod was deleted and created again
	// while its old sandbox runs here): nothing is written to it, the
	// condition patch carrying the old pod's UID is refused (issue 37: the
	// plugin reads no pod to check)
	old := pod("kube-recreated", "18703:80")
	if _, err := k.CreatePod(ctx, &old, kubeNode, true); err != nil {
		t.Fatal(err)
	}
	now := int64(0) // no kubelet runs here to finish a graceful delete
	must(t, k.Admin.CoreV1().Pods(old.Namespace).Delete(ctx, old.Name, metav1.DeleteOptions{GracePeriodSeconds: &now}))
	again := old
	if _, err := k.CreatePod(ctx, &again, kubeNode, true); err != nil {
		t.Fatal(err)
	}
	runSandbox(t, ctx, env, old) // the old pod's sandbox, its UID in containerd's record
	waitMetric(t, env, `nri_hcn_portmap_kubernetes_reports_total{result="failed",what="condition"}`, 1)
	if err := harness.Consistently(ctx, 2*time.Second, func() error {
		p, err := k.Admin.CoreV1().Pods(again.Namespace).Get(ctx, again.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range p.Status.Conditions {
			if c.Type == "hcn.nri.io/port-mappings-ready" {
				return fmt.Errorf("the new pod of that name got the old pod's condition: %+v", c)
			}
		}
		if evs, err := podEvents(ctx, k, again); err != nil || len(evs) != 0 {
			return fmt.Errorf("events on the new pod of that name: %+v %v", evs, err)
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
}

// TestKubernetesNeverInTheWay: with the API server stopped, pods get their
// endpoints as fast as ever; the reports wait and go out when it is back.
func TestKubernetesNeverInTheWay(t *testing.T) {
	env, k, ctx := kubeEnv(t)
	during := pod("kube-during", "18710:80")
	if _, err := k.CreatePod(ctx, &during, kubeNode, true); err != nil {
		t.Fatal(err)
	}
	k.StopAPIServer()
	ns := runSandbox(t, ctx, env, during)
	wantEndpoint(t, ctx, env, during.ID, ns, []hcn.PortMappingPolicy{tcp(18710, 80, "", 1)})
	if code, checks := health(t, env); code != 200 {
		t.Fatalf("/healthz with the API server down: %d %v", code, checks)
	}
	if err := k.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	wantReported(t, ctx, k, during, "Normal", "PortsMapped", "*:18710->80/tcp", corev1.ConditionTrue, "PortsMapped")
}

// TestKubernetesSaysWhoMapsEachPort (issue 26): with hostPort on (the
// default), the pod's event says which host ports the CNI's endpoint maps
// and which ours does; a CNI mapping known not to work (a v1 NAT policy on
// L2Bridge) is a Warning, with the condition's reason, naming the CNI's
// endpoint, the policy and the fix, and is not duplicated by us.
func TestKubernetesSaysWhoMapsEachPort(t *testing.T) {
	env, k, ctx := kubeEnv(t)
	bridge, err := env.SimClient.CreateNetwork(ctx, hcn.NetworkSpec{Name: "cbr0", Type: hcn.NetworkL2Bridge, Subnet: "10.248.0.0/24", Gateway: "10.248.0.1"})
	must(t, err)
	for _, tc := range []struct {
		name   string
		v1NAT  bool // the CNI maps the first port with a v1 NAT policy, not a local-routed v2 PortMapping
		ports  [2]uint16
		typ    string
		reason string
		cond   corev1.ConditionStatus
		why    string                          // the condition's reason
		want   func(cni, ours string) []string // what the event's note says
	}{
		{"the CNI maps one, we map the other", false, [2]uint16{18720, 18721}, "Normal", "PortsMapped", corev1.ConditionTrue, "PortsMapped",
			func(cni, ours string) []string {
				return []string{"host ports mapped by HNS endpoint " + ours + ": *:18721->81/tcp",
					"mapped by the CNI's endpoint " + cni + ": *:18720->80/tcp"}
			}},
		{"the CNI's mapping will not work", true, [2]uint16{18722, 18723}, "Warning", "PortMappingFailed", corev1.ConditionFalse, "CNIPortMappingIneffective",
			func(cni, ours string) []string {
				return []string{"CNIPortMappingIneffective: pod default/kube-who-1", cni, "18722", "localRoutedPortMapping",
					"host ports mapped by HNS endpoint " + ours + ": *:18723->81/tcp",
					"mapped by the CNI's endpoint " + cni + ": *:18722->80/tcp (will not work)"}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "kube-who-0"
			if tc.v1NAT {
				name = "kube-who-1"
			}
			p := pod(name, "")
			p.HostPorts = []*runtimeapi.PortMapping{hostPort(runtimeapi.Protocol_TCP, 80, int32(tc.ports[0]), ""),
				hostPort(runtimeapi.Protocol_TCP, 81, int32(tc.ports[1]), "")}
			if _, err := k.CreatePod(ctx, &p, kubeNode, true); err != nil {
				t.Fatal(err)
			}
			guid, err := env.CreateSandbox(ctx, p)
			must(t, err)
			spec := hcn.EndpointSpec{Name: "cbr0_" + p.ID, NetworkID: bridge.ID}
			theirs := hcn.PortMappingPolicy{Protocol: hcn.TCP, ExternalPort: tc.ports[0], InternalPort: 80}
			if tc.v1NAT {
				spec.NATPolicies = []hcn.PortMappingPolicy{theirs}
			} else {
				theirs.Flags = hcn.NatFlagsLocalRoutedVip
				spec.PortMappings = []hcn.PortMappingPolicy{theirs}
			}
			cni, err := env.SimClient.CreateEndpoint(ctx, spec)
			if err == nil {
				err = env.SimClient.AddNamespaceEndpoint(ctx, guid, cni.ID)
			}
			must(t, err)
			startPod(t, ctx, env, "containerd", p)
			ours := wantEndpoint(t, ctx, env, p.ID, guid, []hcn.PortMappingPolicy{tcp(tc.ports[1], 81, "", 1)})
			wantSaid(t, ctx, k, p, tc.typ, tc.reason, tc.want(cni.ID, ours.Endpoint), tc.cond, tc.why)
		})
	}
}

// Issue 55: a static pod, as a real kubelet runs it. Its sandbox carries
// kubelet's config hash as its UID and kubernetes.io/config.source=file;
// the API server holds its mirror pod, of another UID. The plugin maps
// it, tells it once in an Event, and writes no condition (the UID
// precondition cannot name the mirror pod); resyncs, every second here,
// repeat nothing. A refused patch (the recreated pod above) is told once
// too: it is the same rule.
func TestAStaticPodIsMappedAndToldOnce(t *testing.T) {
	env, k, ctx := kubeEnvWith(t, strings.Replace(eventsConfig, `resync_interval = "0s"`, `resync_interval = "1s"`, 1))
	const hash = "3f0c6b1e9d2a4c5b8e7f6a5d4c3b2a19"
	static := pod("kube-static-"+kubeNode, "18706:80")
	static.Annotations["kubernetes.io/config.source"] = "file"
	static.Annotations["kubernetes.io/config.hash"] = hash
	mirror := static
	mirror.Annotations = map[string]string{"kubernetes.io/config.source": "file", "kubernetes.io/config.hash": hash,
		"kubernetes.io/config.mirror": hash, request.AnnotationPortMappings: "18706:80"}
	if _, err := k.CreatePod(ctx, &mirror, kubeNode, true); err != nil {
		t.Fatal(err)
	}
	static.UID = hash
	ns := runSandbox(t, ctx, env, static)
	wantEndpoint(t, ctx, env, static.ID, ns, []hcn.PortMappingPolicy{tcp(18706, 80, "", 1)})
	waitMetric(t, env, `nri_hcn_portmap_kubernetes_reports_total{result="skipped",what="condition"}`, 1)
	runs := scrape(t, env)[`nri_hcn_portmap_reconcile_runs_total{trigger="periodic"}`]
	err := harness.Eventually(ctx, 20*time.Second, func() error {
		if n := scrape(t, env)[`nri_hcn_portmap_reconcile_runs_total{trigger="periodic"}`]; n < runs+3 {
			return fmt.Errorf("%v resyncs since the event, want 3", n-runs)
		}
		return nil
	})
	must(t, err)
	evs, err := podEvents(ctx, k, static)
	must(t, err)
	if len(evs) != 1 || evs[0].Reason != "PortsMapped" || !strings.Contains(evs[0].Note, "*:18706->80/tcp") {
		t.Errorf("events regarding the static pod after 3 resyncs: %+v, want one PortsMapped", evs)
	}
	got, err := k.Admin.CoreV1().Pods(mirror.Namespace).Get(ctx, mirror.Name, metav1.GetOptions{})
	must(t, err)
	for _, c := range got.Status.Conditions {
		if c.Type == "hcn.nri.io/port-mappings-ready" {
			t.Errorf("the mirror pod got a condition: %+v", c)
		}
	}
	if n := scrape(t, env)[`nri_hcn_portmap_kubernetes_reports_total{result="failed",what="condition"}`]; n != 0 {
		t.Errorf("%v condition patches failed, want none tried", n)
	}
}

// Issue 55: the kubeconfig recipe of docs/kubernetes.md ("The Windows
// service's account"), run as written against a real API server (its
// URL and CA in place of the placeholders, the node win-a): the plugin
// started with the file it writes lists the namespaces over verified TLS
// with the node-bound token of its own ServiceAccount.
func TestTheDocumentedKubeconfigRecipeWorks(t *testing.T) {
	env, ctx := newEnv(t, eventsConfig)
	k, err := env.StartKube(ctx)
	must(t, err)
	applyRBAC(t, ctx, k)
	_, err = k.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: kubeNode}}, metav1.CreateOptions{})
	must(t, err)
	root, err := harness.ModuleRoot()
	must(t, err)
	doc, err := os.ReadFile(filepath.Join(root, "docs/kubernetes.md"))
	must(t, err)
	section, _, _ := strings.Cut(string(doc)[strings.Index(string(doc), "### The Windows service's account"):], "\n## ")
	var script []string
	for _, block := range strings.Split(section, "```sh\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		script = append(script, block)
	}
	if len(script) != 2 || !strings.Contains(script[1], "kubectl config set-cluster") {
		t.Fatalf("docs/kubernetes.md: want the account's commands, then the kubeconfig's: %q", script)
	}
	server := strings.TrimPrefix(k.URL, "https://")
	body := strings.NewReplacer("NODE", kubeNode, "API-SERVER:6443", server, "ca.crt", k.CAFile()).Replace(strings.Join(script, "\n"))
	admin, err := k.AdminKubeconfig()
	must(t, err)
	bin := t.TempDir()
	kubectl, err := harness.Tool("KUBECTL_BIN", "kubectl-v1.37.2", "run `make kube`")
	must(t, err)
	must(t, os.Symlink(kubectl, filepath.Join(bin, "kubectl")))
	work := t.TempDir()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", body)
	cmd.Dir = work
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "KUBECONFIG="+admin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the documented commands: %v\n%s\n%s", err, body, out)
	}
	kubeconfig := filepath.Join(work, "kubeconfig")
	if b, err := os.ReadFile(kubeconfig); err != nil || strings.Contains(string(b), "insecure-skip-tls-verify") || !strings.Contains(string(b), "certificate-authority-data") {
		t.Fatalf("the kubeconfig written: %v\n%s", err, b)
	}
	cfg := eventsConfig + fmt.Sprintf("\n[kubernetes]\nenabled = true\nkubeconfig = %q\nnode_name = %q\n", kubeconfig, kubeNode)
	must(t, os.WriteFile(env.ConfigPath, []byte(cfg), 0o644))
	must(t, env.StartPluginEvents(ctx))
	waitMetric(t, env, "nri_hcn_portmap_kubernetes_namespaces_synced", 1)
}
