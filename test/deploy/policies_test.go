package deploy

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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/kube"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

// Issue 31: the chart's admission policies, installed by helm on a real
// kube-apiserver (its admission plugins on: ValidatingAdmissionPolicy,
// PodSecurity). An annotated pod in a baseline namespace is refused at
// create, saying why; in a privileged one, or without the annotation, it
// is created; the default level for an unlabelled namespace is the chart's
// value. The plugin's ServiceAccount, with a token bound to its pod on
// node win-a as kubelet gets it, may write the status of and events on
// win-a's pods only; a token that names no node may write nothing.
func TestAdmissionPoliciesOnTheAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	k, kubeconfig := startKube(t, ctx)
	const ns, release = "nri-hcn-portmap", "nri-hcn-portmap"
	for name, level := range map[string]string{ns: "privileged", "team": "baseline", "open": "privileged", "plain": ""} {
		labels := map[string]string{}
		if level != "" {
			labels["pod-security.kubernetes.io/enforce"] = level
		}
		if _, err := k.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	helmOn(t, ctx, kubeconfig, "install", release, chart, "-n", ns)
	for _, name := range []string{"nri-hcn-portmap-pod-security", "nri-hcn-portmap-node-restriction"} {
		if _, err := k.Admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Fatalf("helm did not install the policy %s on an API server that has the API: %v", name, err)
		}
	}

	create := func(namespace, name, node string, annotated bool) (*corev1.Pod, error) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "example/app:1"}}}}
		if annotated {
			pod.Annotations = map[string]string{"hcn.nri.io/port-mappings": "8080:80"}
		}
		return k.Admin.CoreV1().Pods(namespace).Create(ctx, pod, metav1.CreateOptions{})
	}
	// a policy takes effect once the API server has loaded it: the first
	// refusal is waited for, every other answer is then checked once
	err := harness.Eventually(ctx, 30*time.Second, func() error {
		if _, err := create("team", "annotated", "win-a", true); err == nil {
			_ = k.Admin.CoreV1().Pods("team").Delete(ctx, "annotated", metav1.DeleteOptions{})
			return fmt.Errorf("an annotated pod in a baseline namespace was created")
		} else if !strings.Contains(err.Error(), "namespace team enforces Pod Security level baseline, which forbids host ports") {
			return fmt.Errorf("refused, but not saying why: %w", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		namespace string
		annotated bool
		refused   bool
	}{
		{"team", false, false}, // no annotation: not the policy's business
		{"open", true, false},  // privileged
	} {
		name := fmt.Sprintf("pod-%v", tc.annotated)
		if _, err := create(tc.namespace, name, "win-a", tc.annotated); err != nil {
			t.Errorf("%s/%s (annotated %v): %v, want created", tc.namespace, name, tc.annotated, err)
		}
	}
	// unlabelled: the chart's default level, baseline (the cluster's own
	// cannot be read, so it grants nothing)
	if _, err := create("plain", "annotated", "win-a", true); err == nil || !strings.Contains(err.Error(), "enforces Pod Security level baseline") {
		t.Errorf("an annotated pod in an unlabelled namespace: %v, want refused by the default level baseline", err)
	}
	// the operator says the cluster's default is privileged
	helmOn(t, ctx, kubeconfig, "upgrade", release, chart, "-n", ns, "--reuse-values", "--set", "config.admission.podSecurityDefaultLevel=privileged")
	err = harness.Eventually(ctx, 30*time.Second, func() error {
		if _, err := create("plain", "annotated-2", "win-a", true); err != nil {
			return fmt.Errorf("an annotated pod in an unlabelled namespace with the default level privileged: %w", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	// the plugin's writes stay on its node
	plugin, err := k.Admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plugin-win-a", Namespace: ns},
		Spec: corev1.PodSpec{NodeName: "win-a", ServiceAccountName: release,
			Containers: []corev1.Container{{Name: "plugin", Image: "nri-hcn-portmap:test"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token, err := k.PodToken(ctx, ns, release, plugin)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := k.Client(token)
	if err != nil {
		t.Fatal(err)
	}
	mine, err := create("open", "mine", "win-a", false)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := create("open", "theirs", "win-b", false)
	if err != nil {
		t.Fatal(err)
	}
	err = harness.Eventually(ctx, 30*time.Second, func() error {
		if err := patchStatus(ctx, sa, theirs); err == nil {
			return fmt.Errorf("the plugin of win-a patched the status of a pod of win-b")
		} else if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "nri-hcn-portmap on node win-a may not write the status of pod open/theirs") {
			return fmt.Errorf("refused, but not by the policy: %w", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := patchStatus(ctx, sa, mine); err != nil {
		t.Errorf("the plugin of win-a patching its own node's pod: %v", err)
	}
	if err := createEvent(ctx, sa, mine, "win-a"); err != nil {
		t.Errorf("the plugin of win-a creating its event: %v", err)
	}
	if err := createEvent(ctx, sa, mine, "win-b"); err == nil || !apierrors.IsForbidden(err) {
		t.Errorf("the plugin of win-a creating an event as win-b's: %v, want forbidden", err)
	}
	// issue 37: what a stolen token gets. No pod is read (RBAC); of a pod
	// of its node, no status but its own condition is changed; no event
	// is signed on a pod of another namespace; another pod of the same
	// name (recreated) is never patched (the UID precondition).
	if _, err := sa.CoreV1().Pods("open").Get(ctx, "mine", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the plugin's token reading a pod: %v, want forbidden", err)
	}
	ready := `{"status":{"conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2026-12-01T00:00:00Z"}]}}`
	if _, err := sa.CoreV1().Pods("open").Patch(ctx, "mine", types.StrategicMergePatchType, []byte(ready), metav1.PatchOptions{}, "status"); err == nil ||
		!strings.Contains(err.Error(), "may change only its own condition") {
		t.Errorf("the plugin's token setting Ready on its node's pod: %v, want refused", err)
	}
	phase := `{"status":{"phase":"Failed"}}`
	if _, err := sa.CoreV1().Pods("open").Patch(ctx, "mine", types.StrategicMergePatchType, []byte(phase), metav1.PatchOptions{}, "status"); err == nil ||
		!strings.Contains(err.Error(), "may change only its own condition") {
		t.Errorf("the plugin's token setting the phase of its node's pod: %v, want refused", err)
	}
	// issue 46: a status update keeps only the old pod's spec and owners,
	// so through pods/status the token could rewrite the rest; every key
	// but the plugin's own condition is pinned
	cond := `"status":{"conditions":[{"type":"hcn.nri.io/port-mappings-ready","status":"True","reason":"PortsMapped","lastTransitionTime":"2026-12-01T00:00:00Z"}]}`
	for what, patch := range map[string]string{
		"a label (a Service's selector)":            `{"metadata":{"labels":{"app":"elsewhere"}}}`,
		"the port-mappings annotation":              `{"metadata":{"annotations":{"hcn.nri.io/port-mappings":"9999:80"}}}`,
		"a finalizer (the pod is never deleted)":    `{"metadata":{"finalizers":["example.com/never"]}}`,
		"a label beside its own condition":          `{"metadata":{"labels":{"app":"elsewhere"}},` + cond + `}`,
		"status.allocatedResources":                 `{"status":{"allocatedResources":{"cpu":"1"}}}`,
		"status.resources":                          `{"status":{"resources":{"requests":{"cpu":"1"}}}}`,
		"status.message":                            `{"status":{"message":"evicted by nri-hcn-portmap"}}`,
		"another condition, its own left unchanged": `{"status":{"conditions":[{"type":"example.com/gate","status":"True"}]}}`,
	} {
		_, err := sa.CoreV1().Pods("open").Patch(ctx, "mine", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
		if err == nil || !strings.Contains(err.Error(), "may change only its own condition") {
			after, _ := k.Admin.CoreV1().Pods("open").Get(ctx, "mine", metav1.GetOptions{})
			t.Errorf("the plugin's token changing %s of its node's pod: %v, want refused (the pod now: labels %v, annotations %v, finalizers %v, status %+v)",
				what, err, after.Labels, after.Annotations, after.Finalizers, after.Status)
		}
	}
	// issue 54: its own condition as it writes it, once, with a bounded
	// message (the plugin cuts its own at 1024 bytes)
	if err := patchStatus(ctx, sa, mine); err != nil {
		t.Fatal(err)
	}
	long := `{"status":{"conditions":[{"type":"hcn.nri.io/port-mappings-ready","status":"False","reason":"HNSError","message":"` +
		strings.Repeat("x", 64<<10) + `","lastTransitionTime":"2026-12-01T00:00:00Z"}]}}`
	twice := `[{"op":"add","path":"/status/conditions/-","value":{"type":"hcn.nri.io/port-mappings-ready","status":"True","reason":"PortsMapped"}}]`
	odd := `{"status":{"conditions":[{"type":"hcn.nri.io/port-mappings-ready","status":"Unknown","reason":"PortsMapped"}]}}`
	spaced := `{"status":{"conditions":[{"type":"hcn.nri.io/port-mappings-ready","status":"True","reason":"Ports mapped, see https://example.com"}]}}`
	for what, p := range map[string]struct {
		typ   types.PatchType
		patch string
	}{
		"a 64 KiB message":        {types.StrategicMergePatchType, long},
		"its condition twice":     {types.JSONPatchType, twice},
		"a status of its own":     {types.StrategicMergePatchType, odd},
		"a reason that is a text": {types.StrategicMergePatchType, spaced},
	} {
		if _, err := sa.CoreV1().Pods("open").Patch(ctx, "mine", p.typ, []byte(p.patch), metav1.PatchOptions{}, "status"); err == nil ||
			!strings.Contains(err.Error(), "once, as it writes it") {
			t.Errorf("the plugin's token writing %s: %v, want refused by the policy", what, err)
		}
	}
	// and what must still work: its condition on a pod being deleted (a
	// finalizer holds it), whose deletionTimestamp the status update keeps
	held, err := k.Admin.CoreV1().Pods("open").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: "open",
		Finalizers: []string{"example.com/hold"}}, Spec: corev1.PodSpec{NodeName: "win-a", Containers: []corev1.Container{{Name: "app", Image: "example/app:1"}}}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Admin.CoreV1().Pods("open").Delete(ctx, "held", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := patchStatus(ctx, sa, held); err != nil {
		t.Errorf("the plugin's condition on its node's pod being deleted: %v", err)
	}
	elsewhere, err := create("team", "elsewhere", "win-a", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := createEventIn(ctx, sa, "open", elsewhere, "win-a"); err == nil || !strings.Contains(err.Error(), "on pods of the event's namespace") {
		t.Errorf("the plugin's token creating an event in open regarding team/elsewhere: %v, want refused", err)
	}
	stale := `{"metadata":{"uid":"00000000-0000-0000-0000-000000000001"},"status":{"conditions":[{"type":"hcn.nri.io/port-mappings-ready","status":"True","reason":"PortsMapped","lastTransitionTime":"2026-12-01T00:00:00Z"}]}}`
	if _, err := sa.CoreV1().Pods("open").Patch(ctx, "mine", types.StrategicMergePatchType, []byte(stale), metav1.PatchOptions{}, "status"); err == nil ||
		!(apierrors.IsConflict(err) || apierrors.IsInvalid(err)) {
		t.Errorf("a condition patch carrying another pod's UID: %v, want refused (409)", err)
	}
	// the Windows service's own account (docs/kubernetes.md): another
	// ServiceAccount of the release's namespace, bound to the ClusterRole,
	// its token bound to the Node object: held by the same policy
	if _, err := k.Admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "node-win-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "nri-hcn-portmap-node-win-a",
		Labels: map[string]string{"hcn.nri.io/node-restricted": "true"}},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: release},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "node-win-a", Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node, err := k.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "win-a"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svcToken, err := k.NodeToken(ctx, ns, "node-win-a", node)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := k.Client(svcToken)
	if err != nil {
		t.Fatal(err)
	}
	err = harness.Eventually(ctx, 30*time.Second, func() error { return patchStatus(ctx, svc, mine) }) // its RBAC binding takes effect
	if err != nil {
		t.Errorf("the service's account patching a pod of its node: %v", err)
	}
	if err := patchStatus(ctx, svc, theirs); err == nil || !strings.Contains(err.Error(), "nri-hcn-portmap on node win-a may not write") {
		t.Errorf("the service's account patching a pod of another node: %v, want refused by the policy", err)
	}
	svcUnbound, err := k.Token(ctx, ns, "node-win-a")
	if err != nil {
		t.Fatal(err)
	}
	loose, err := k.Client(svcUnbound)
	if err != nil {
		t.Fatal(err)
	}
	if err := patchStatus(ctx, loose, mine); err == nil || !strings.Contains(err.Error(), "token names no node") {
		t.Errorf("the service's account with a token naming no node: %v, want refused", err)
	}
	// a token bound to no pod names no node: nothing is written with it
	unbound, err := k.Token(ctx, ns, release)
	if err != nil {
		t.Fatal(err)
	}
	nowhere, err := k.Client(unbound)
	if err != nil {
		t.Fatal(err)
	}
	if err := patchStatus(ctx, nowhere, mine); err == nil || !strings.Contains(err.Error(), "token names no node") {
		t.Errorf("a token naming no node patching a pod: %v, want refused", err)
	}
	// doctor's probe (a dry-run event signed as another node) tells the
	// policy is there, and that it is not once it is gone
	probe, err := kube.NewRESTAPI(k.RESTConfig(token))
	if err != nil {
		t.Fatal(err)
	}
	if held, err := probe.ProbeNodeRestriction(ctx, "win-a"); err != nil || !held {
		t.Errorf("doctor's probe with the policy installed: held %v, %v", held, err)
	}
	helmOn(t, ctx, kubeconfig, "upgrade", release, chart, "-n", ns, "--reuse-values", "--set", "admissionPolicies.nodeRestriction=false")
	err = harness.Eventually(ctx, 30*time.Second, func() error {
		if held, err := probe.ProbeNodeRestriction(ctx, "win-a"); err != nil || held {
			return fmt.Errorf("doctor's probe without the policy: held %v, %v", held, err)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// patchStatus sets the plugin's condition on pod, as the reporter does.
func patchStatus(ctx context.Context, c *kubernetes.Clientset, pod *corev1.Pod) error {
	patch := `{"status":{"conditions":[{"type":"hcn.nri.io/port-mappings-ready","status":"True","reason":"PortsMapped","lastTransitionTime":"2026-12-01T00:00:00Z"}]}}`
	_, err := c.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
	return err
}

// createEvent creates the plugin's event on pod, signed as node's.
func createEvent(ctx context.Context, c *kubernetes.Clientset, pod *corev1.Pod, node string) error {
	return createEventIn(ctx, c, pod.Namespace, pod, node)
}

// createEventIn is createEvent with the event in namespace.
func createEventIn(ctx context.Context, c *kubernetes.Clientset, namespace string, pod *corev1.Pod, node string) error {
	ev := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%s.%d", pod.Name, node, time.Now().UnixNano()), Namespace: namespace},
		EventTime: metav1.NewMicroTime(time.Now()), ReportingController: "hcn.nri.io/nri-hcn-portmap", ReportingInstance: "nri-hcn-portmap-" + node,
		Action: "MapHostPorts", Reason: "PortsMapped", Type: corev1.EventTypeNormal, Note: "test",
		Regarding: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}}
	_, err := c.EventsV1().Events(namespace).Create(ctx, ev, metav1.CreateOptions{})
	return err
}

// Issue 54: the node restriction holds the plugin's own accounts, not a
// namespace's, wherever the chart or the kustomize base puts them. The
// chart in the namespace infra, and the kustomize base under an overlay
// that moves it to tools (the policy's component added), each on its own
// API server: the plugin's token from there, bound to its pod on win-a,
// is refused a pod of win-b and writes its own node's; another
// ServiceAccount of the same namespace, granted pods/status by a role of
// its own, is not held.
func TestTheNodeRestrictionHoldsThePluginsAccountsWhereverTheyAre(t *testing.T) {
	for _, route := range []struct{ name, ns string }{{"chart", "infra"}, {"kustomize", "tools"}} {
		t.Run(route.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			k, kubeconfig := startKube(t, ctx)
			for _, name := range []string{route.ns, "open"} {
				if _, err := k.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			const sa = "nri-hcn-portmap"
			if route.name == "chart" {
				helmOn(t, ctx, kubeconfig, "install", "nri-hcn-portmap", chart, "-n", route.ns)
			} else {
				file := filepath.Join(t.TempDir(), "rendered.yaml")
				if err := os.WriteFile(file, kustomizeBuild(t, overlayIn(t, route.ns, "pods-nat", "components/admission-policies")), 0o644); err != nil {
					t.Fatal(err)
				}
				if out, err := exec.CommandContext(ctx, kubectlBin(t), "--kubeconfig", kubeconfig, "apply", "-f", file).CombinedOutput(); err != nil {
					t.Fatalf("kubectl apply of the overlay: %v\n%s", err, out)
				}
			}
			plugin, err := k.Admin.CoreV1().Pods(route.ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "plugin-win-a"},
				Spec: corev1.PodSpec{NodeName: "win-a", ServiceAccountName: sa, Containers: []corev1.Container{{Name: "plugin", Image: "nri-hcn-portmap:test"}}}},
				metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			token, err := k.PodToken(ctx, route.ns, sa, plugin)
			if err != nil {
				t.Fatal(err)
			}
			pluginClient, err := k.Client(token)
			if err != nil {
				t.Fatal(err)
			}
			pods := heldToWinA(t, ctx, k, pluginClient, "the plugin's token from "+route.ns)
			// another account of the namespace, with a grant of its own
			if _, err := k.Admin.CoreV1().ServiceAccounts(route.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := k.Admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "status-writer"},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods/status"}, Verbs: []string{"patch"}}}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, err := k.Admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "status-writer"},
				RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "status-writer"},
				Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "other", Namespace: route.ns}}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			otherToken, err := k.Token(ctx, route.ns, "other")
			if err != nil {
				t.Fatal(err)
			}
			other, err := k.Client(otherToken)
			if err != nil {
				t.Fatal(err)
			}
			err = harness.Eventually(ctx, 30*time.Second, func() error { return patchStatus(ctx, other, pods["theirs"]) }) // its binding takes effect
			if err != nil {
				t.Errorf("another account of %s, with a token naming no node, patching a pod of win-b: %v, want allowed (the policy is not its)", route.ns, err)
			}
		})
	}
}

// Issue 55: a cluster whose Windows nodes run the plugin as a service
// applies deploy/kustomize/service-nodes (no DaemonSet): the ClusterRole
// and the policies. A node's account made as docs/kubernetes.md says
// (its ServiceAccount, a binding labelled hcn.nri.io/node-restricted, a
// token bound to the Node) writes its own node's pods and is refused
// another node's.
func TestTheServiceNodesManifestsHoldEachNodesAccount(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	k, kubeconfig := startKube(t, ctx)
	const ns = "nri-hcn-portmap"
	for _, name := range []string{ns, "open"} {
		if _, err := k.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := exec.CommandContext(ctx, kubectlBin(t), "--kubeconfig", kubeconfig, "apply", "-k", filepath.Join(kustomize, "service-nodes")).CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply -k service-nodes: %v\n%s", err, out)
	}
	if dss, err := k.Admin.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{}); err != nil || len(dss.Items) != 0 {
		t.Fatalf("the service nodes' manifests made DaemonSets: %v %v", dss, err)
	}
	// docs/kubernetes.md, "The Windows service's account", for node win-a
	if _, err := k.Admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "node-win-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "nri-hcn-portmap-node-win-a",
		Labels: map[string]string{"hcn.nri.io/node-restricted": "true"}},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "nri-hcn-portmap"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "node-win-a", Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node, err := k.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "win-a"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token, err := k.NodeToken(ctx, ns, "node-win-a", node)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := k.Client(token)
	if err != nil {
		t.Fatal(err)
	}
	heldToWinA(t, ctx, k, svc, "the service's account of win-a")
}

// heldToWinA creates a pod on win-a (mine) and one on win-b (theirs) in
// the namespace open, and checks that who, a client whose token names
// win-a, is refused theirs by the node-restriction policy (once the API
// server has loaded it) and writes mine.
func heldToWinA(t *testing.T, ctx context.Context, k *harness.Kube, c *kubernetes.Clientset, who string) map[string]*corev1.Pod {
	t.Helper()
	pods := map[string]*corev1.Pod{}
	for name, on := range map[string]string{"mine": "win-a", "theirs": "win-b"} {
		p, err := k.Admin.CoreV1().Pods("open").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: on, Containers: []corev1.Container{{Name: "app", Image: "example/app:1"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pods[name] = p
	}
	err := harness.Eventually(ctx, 30*time.Second, func() error {
		if err := patchStatus(ctx, c, pods["theirs"]); err == nil {
			return fmt.Errorf("%s on win-a patched the status of a pod of win-b", who)
		} else if !strings.Contains(err.Error(), "nri-hcn-portmap on node win-a may not write the status of pod open/theirs") {
			return fmt.Errorf("refused, but not by the policy: %w", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := patchStatus(ctx, c, pods["mine"]); err != nil {
		t.Errorf("%s patching a pod of its node: %v", who, err)
	}
	return pods
}
