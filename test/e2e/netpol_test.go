package e2e

import (
	"context"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"sigs.k8s.io/yaml"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

// applyPolicy creates (or replaces) the NetworkPolicy name in ns from its
// YAML spec; "" deletes it.
func applyPolicy(t *testing.T, ctx context.Context, k *harness.Kube, ns, name, spec string) {
	t.Helper()
	api := k.Admin.NetworkingV1().NetworkPolicies(ns)
	_ = api.Delete(ctx, name, metav1.DeleteOptions{})
	if spec == "" {
		return
	}
	var np networkingv1.NetworkPolicy
	must(t, yaml.UnmarshalStrict([]byte("spec:\n  "+strings.ReplaceAll(spec, "\n", "\n  ")), &np))
	np.Name, np.Namespace = name, ns
	_, err := api.Create(ctx, &np, metav1.CreateOptions{})
	must(t, err)
}

// labelled is p in namespace ns with labels, asking host port port by
// hostPort (container port 80), created in the API server on the node.
func labelled(t *testing.T, ctx context.Context, k *harness.Kube, name, ns string, port int32, labels map[string]string) harness.Pod {
	t.Helper()
	p := inNamespace(pod(name, ""), ns)
	p.Labels = labels
	p.HostPorts = []*runtimeapi.PortMapping{hostPort(runtimeapi.Protocol_TCP, 80, port, "")}
	_, err := k.CreatePod(ctx, &p, kubeNode, true)
	must(t, err)
	return p
}

const (
	denyAll     = "podSelector: {}\npolicyTypes: [Ingress]"
	openPort80  = "podSelector: {}\ningress: [{ports: [{port: 80}]}]"
	clientsOnly = "podSelector: {matchLabels: {app: shop}}\ningress: [{from: [{podSelector: {matchLabels: {role: client}}}]}]"
)

// Issue 52, against a real kube-apiserver, on both paths: a pod with a
// host port and no policy is mapped; a default-deny ingress policy created
// afterwards removes the mapping within the bound and the pod's condition
// names the policy; a policy admitting every source to that port maps it
// again without a restart; a pod whose policy admits only role=client is
// refused at start (the pod starts: RunPodSandbox is not failed), told
// why.
func TestNetworkPolicyDecidesHostPorts(t *testing.T) {
	for i, source := range []string{"nri", "containerd"} {
		t.Run(source, func(t *testing.T) {
			env, k, ctx := podSecurityEnv(t, source, map[string]string{"team": "privileged", "shop": "privileged"}, false)
			port := int32(18900 + 20*i)
			waitMetric(t, env, "nri_hcn_portmap_kubernetes_network_policies_synced", 1)
			web := labelled(t, ctx, k, "np-web-"+source, "team", port, map[string]string{"app": "web"})
			guid, err := start(t, ctx, env, source, web)
			must(t, err)
			mapped := []hcn.PortMappingPolicy{tcp(uint16(port), 80, "", 1)}
			wantEndpoint(t, ctx, env, web.ID, guid, mapped)

			applyPolicy(t, ctx, k, "team", "deny", denyAll)
			wantNoEndpoint(t, ctx, env, web.ID)
			wantSaid(t, ctx, k, web, "Warning", "PortMappingFailed", []string{"NetworkPolicyIsolatesPod: ", "NetworkPolicy team/deny selects the pod"},
				corev1.ConditionFalse, "NetworkPolicyIsolatesPod")

			applyPolicy(t, ctx, k, "team", "open-80", openPort80)
			wantEndpoint(t, ctx, env, web.ID, guid, mapped)
			wantReported(t, ctx, k, web, "Normal", "PortsMapped", "host ports mapped", corev1.ConditionTrue, "PortsMapped")

			applyPolicy(t, ctx, k, "shop", "clients", clientsOnly)
			shop := labelled(t, ctx, k, "np-shop-"+source, "shop", port+1, map[string]string{"app": "shop"})
			if _, err := start(t, ctx, env, source, shop); err != nil {
				t.Fatalf("the start of a pod its policy isolates: %v; want it started, without its host port", err)
			}
			wantSaid(t, ctx, k, shop, "Warning", "PortMappingFailed", []string{"NetworkPolicyIsolatesPod: ", "NetworkPolicy shop/clients selects the pod",
				"admission.network_policy"}, corev1.ConditionFalse, "NetworkPolicyIsolatesPod")
			wantNoEndpoint(t, ctx, env, shop.ID)
		})
	}
}

// Issue 52: where the API server serves a policy kind the plugin does not
// evaluate (here Antrea's ClusterNetworkPolicy, its CRD registered), no
// host port is mapped, those in place are removed, and the pod is told
// why; admission.network_policy = "kubernetes-only" (the operator's word
// that no such policy selects a pod with host ports) maps it again.
func TestAPolicyKindThePluginDoesNotEvaluateKeepsHostPortsClosed(t *testing.T) {
	env, k, ctx := podSecurityEnv(t, "containerd", map[string]string{"team": "privileged"}, false, "labels_max_age = \"4s\"\n")
	waitMetric(t, env, "nri_hcn_portmap_kubernetes_network_policies_synced", 1)
	web := labelled(t, ctx, k, "np-kind-web", "team", 18950, map[string]string{"app": "web"})
	guid, err := start(t, ctx, env, "containerd", web)
	must(t, err)
	mapped := []hcn.PortMappingPolicy{tcp(18950, 80, "", 1)}
	wantEndpoint(t, ctx, env, web.ID, guid, mapped)

	crd := `{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"clusternetworkpolicies.crd.antrea.io"},
"spec":{"group":"crd.antrea.io","scope":"Cluster","names":{"plural":"clusternetworkpolicies","singular":"clusternetworkpolicy","kind":"ClusterNetworkPolicy"},
"versions":[{"name":"v1beta1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}`
	must(t, k.Admin.Discovery().RESTClient().Post().AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions").
		SetHeader("Content-Type", "application/json").Body([]byte(crd)).Do(ctx).Error())
	wantNoEndpoint(t, ctx, env, web.ID)
	wantSaid(t, ctx, k, web, "Warning", "PortMappingFailed", []string{"NetworkPolicyUnknown: ", "crd.antrea.io/clusternetworkpolicies",
		`admission.network_policy = "kubernetes-only"`}, corev1.ConditionFalse, "NetworkPolicyUnknown")

	cfg, err := os.ReadFile(env.ConfigPath)
	must(t, err)
	must(t, os.WriteFile(env.ConfigPath, []byte(strings.Replace(string(cfg), "[admission]\n", "[admission]\nnetwork_policy = \"kubernetes-only\"\n", 1)), 0o644))
	env.Plugin.Stop()
	must(t, env.StartPluginEvents(ctx))
	wantEndpoint(t, ctx, env, web.ID, guid, mapped)
}

// Issue 52: what the plugin cannot know grants nothing new. With the API
// server stopped, the policies last read stay in force for
// kubernetes.labels_max_age; past it the mapping in place is removed and
// a new pod is not mapped, each told why; the API server back, both are
// mapped without a restart.
func TestTheAPIServerStoppedGrantsNothingNew(t *testing.T) {
	env, k, ctx := podSecurityEnv(t, "containerd", map[string]string{"team": "privileged"}, false, "labels_max_age = \"4s\"\n")
	waitMetric(t, env, "nri_hcn_portmap_kubernetes_network_policies_synced", 1)
	old := labelled(t, ctx, k, "np-old", "team", 18960, map[string]string{"app": "web"})
	young := labelled(t, ctx, k, "np-young", "team", 18961, map[string]string{"app": "web"})
	guid, err := start(t, ctx, env, "containerd", old)
	must(t, err)
	wantEndpoint(t, ctx, env, old.ID, guid, []hcn.PortMappingPolicy{tcp(18960, 80, "", 1)})

	k.StopAPIServer()
	waitMetric(t, env, "nri_hcn_portmap_kubernetes_network_policies_stale", 1)
	wantNoEndpoint(t, ctx, env, old.ID)
	guid2, err := start(t, ctx, env, "containerd", young)
	must(t, err)
	waitMetric(t, env, `nri_hcn_portmap_pods_failing{reason="NetworkPolicyUnknown"}`, 2)
	wantNoEndpoint(t, ctx, env, young.ID)

	must(t, k.RestartAPIServer(ctx))
	wantEndpoint(t, ctx, env, old.ID, guid, []hcn.PortMappingPolicy{tcp(18960, 80, "", 1)})
	wantEndpoint(t, ctx, env, young.ID, guid2, []hcn.PortMappingPolicy{tcp(18961, 80, "", 1)})
	if n := harness.Sum(scrape(t, env), "nri_hcn_portmap_pods_failing"); n != 0 {
		t.Errorf("%v pods failing once the API server is back", n)
	}
}
