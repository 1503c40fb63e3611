package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

// podSecurityConfig is both mapping sources with the annotation's Pod
// Security check as it is by default (enforced), no periodic resync, and
// retries capped at 1 s (an annotation waiting for its namespace's level
// is retried by the queue).
const podSecurityConfig = `[plugin]
mapping_sources = ["annotations", "cri"]
resync_interval = "0s"
` + harness.HCNConfig + `
[admission]
`

// podSecurityEnv is an environment with a real API server whose
// namespaces have the given enforce levels ("": no label), the plugin
// (from source: nri or containerd) reporting with the chart's RBAC. With
// apiDown the API server is stopped before the plugin starts.
func podSecurityEnv(t *testing.T, source string, levels map[string]string, apiDown bool, kubeKeys ...string) (*harness.Env, *harness.Kube, context.Context) {
	t.Helper()
	env, ctx := newEnv(t, podSecurityConfig)
	k, err := env.StartKube(ctx)
	if err != nil {
		t.Fatal(err)
	}
	applyRBAC(t, ctx, k)
	for name, level := range levels {
		labels := map[string]string{}
		if level != "" {
			labels["pod-security.kubernetes.io/enforce"] = level
		}
		_, err := k.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
		must(t, err)
	}
	kubeconfig, err := k.ServiceAccountKubeconfig(ctx, "nri-hcn-portmap", "nri-hcn-portmap")
	must(t, err)
	cfg := strings.Replace(podSecurityConfig, "[hcn]\n", "[hcn]\nretry_max = \"1s\"\n", 1)
	var kubeOnes []string
	for _, k := range kubeKeys { // "admission.KEY = ..." goes to [admission], the rest to [kubernetes]
		if key, ok := strings.CutPrefix(k, "admission."); ok {
			cfg = strings.Replace(cfg, "[admission]\n", "[admission]\n"+key, 1)
		} else {
			kubeOnes = append(kubeOnes, k)
		}
	}
	cfg += fmt.Sprintf("\n[kubernetes]\nenabled = true\nkubeconfig = %q\nnode_name = %q\n%s", kubeconfig, kubeNode, strings.Join(kubeOnes, ""))
	must(t, os.WriteFile(env.ConfigPath, []byte(cfg), 0o644))
	if apiDown {
		k.StopAPIServer()
	}
	if source == "nri" {
		err = env.StartPlugin(ctx, "--source", "nri")
	} else {
		err = env.StartPluginEvents(ctx)
	}
	must(t, err)
	return env, k, ctx
}

// start runs p's sandbox by source: RunPodSandbox (its error returned),
// or containerd's task start (nil).
func start(t *testing.T, ctx context.Context, env *harness.Env, source string, p harness.Pod) (hcn.GUID, error) {
	t.Helper()
	if source == "nri" {
		return env.RunPod(ctx, p)
	}
	return runSandbox(t, ctx, env, p), nil
}

func inNamespace(p harness.Pod, ns string) harness.Pod {
	p.Namespace = ns
	return p
}

// Issue 31, through containerd with both event sources: an annotated pod
// in a baseline namespace gets no endpoint and holds no port (another
// pod takes it), its start fails on the NRI path, and it is told why (a
// Warning naming the namespace, the level and the fix, the condition
// False); a privileged namespace's pod is mapped; relabelling a namespace
// changes the next pod's outcome with no restart; a hostPort pod in a
// restricted namespace is mapped (the API server judged it); and
// admission.pod_security = "off", reloaded, maps the annotation anywhere.
func TestAnnotationObeysPodSecurity(t *testing.T) {
	for i, source := range []string{"nri", "containerd"} {
		t.Run(source, func(t *testing.T) {
			levels := map[string]string{"team": "baseline", "open": "privileged", "locked": "restricted"}
			env, k, ctx := podSecurityEnv(t, source, levels, false)
			port := uint16(18800 + 20*i)
			at := func(n uint16) string { return fmt.Sprintf("%d:80", port+n) }

			refused := inNamespace(pod("ps-refused-"+source, at(0)), "team")
			_, err := k.CreatePod(ctx, &refused, kubeNode, true)
			must(t, err)
			// the namespace's level must be known first: until then a
			// start waits (and fail-open lets the pod go on)
			waitMetric(t, env, "nri_hcn_portmap_kubernetes_namespaces_synced", 1)
			_, err = start(t, ctx, env, source, refused)
			if source == "nri" && (err == nil || !strings.Contains(err.Error(), `namespace "team" enforces "baseline"`)) {
				t.Fatalf("RunPodSandbox in a baseline namespace: %v, want refused naming the namespace and its level", err)
			}
			wantSaid(t, ctx, k, refused, "Warning", "PortMappingFailed", []string{"PodSecurityForbidsHostPorts: ",
				`namespace "team" enforces "baseline"`, "pod-security.kubernetes.io/enforce=privileged"}, corev1.ConditionFalse, "PodSecurityForbidsHostPorts")
			wantNoEndpoint(t, ctx, env, refused.ID)

			// no port held: a privileged namespace's pod takes it
			taker := inNamespace(pod("ps-taker-"+source, at(0)), "open")
			guid, err := start(t, ctx, env, source, taker)
			must(t, err)
			wantEndpoint(t, ctx, env, taker.ID, guid, []hcn.PortMappingPolicy{tcp(port, 80, "", 1)})

			// a hostPort in a restricted namespace passed the API server
			hp := inNamespace(pod("ps-hostport-"+source, ""), "locked")
			hp.HostPorts = append(hp.HostPorts, hostPort(runtimeapi.Protocol_TCP, 80, int32(port+1), ""))
			guid, err = start(t, ctx, env, source, hp)
			must(t, err)
			wantEndpoint(t, ctx, env, hp.ID, guid, []hcn.PortMappingPolicy{tcp(port+1, 80, "", 1)})

			// relabelled privileged: a pod started once the plugin has seen
			// it is mapped, no restart
			team, err := k.Admin.CoreV1().Namespaces().Get(ctx, "team", metav1.GetOptions{})
			must(t, err)
			team.Labels["pod-security.kubernetes.io/enforce"] = "privileged"
			_, err = k.Admin.CoreV1().Namespaces().Update(ctx, team, metav1.UpdateOptions{})
			must(t, err)
			next := uint16(2)
			err = harness.Eventually(ctx, 20*time.Second, func() error {
				p := inNamespace(pod(fmt.Sprintf("ps-relabelled-%s-%d", source, next), at(next)), "team")
				next++
				guid, err := start(t, ctx, env, source, p)
				if err != nil {
					return err
				}
				return harness.Eventually(ctx, 3*time.Second, func() error {
					if ep := endpointOf(t, ctx, env, p.ID); ep == nil || ep.NetNS != guid {
						return fmt.Errorf("pod %s in the relabelled namespace not mapped", p.Name)
					}
					return nil
				})
			})
			if err != nil {
				t.Fatal(err)
			}

			// the check turned off, by a reload
			cfg, err := os.ReadFile(env.ConfigPath)
			must(t, err)
			must(t, os.WriteFile(env.ConfigPath, []byte(strings.Replace(string(cfg), "[admission]\n", "[admission]\npod_security = \"off\"\n", 1)), 0o644))
			if out, _, err := env.Command(ctx, "reload"); err != nil {
				t.Fatalf("reload: %q %v", out, err)
			}
			off := inNamespace(pod("ps-off-"+source, at(19)), "locked")
			guid, err = start(t, ctx, env, source, off)
			must(t, err)
			wantEndpoint(t, ctx, env, off.ID, guid, []hcn.PortMappingPolicy{tcp(port+19, 80, "", 1)})
		})
	}
}

// Issue 31: with the API server down since the plugin started, no
// namespace's level is known: the annotation is held back (the pod runs,
// fail-open, without its ports) and mapped once the API server is back and
// the level allows it.
func TestAnnotationWaitsForTheAPIServer(t *testing.T) {
	env, k, ctx := podSecurityEnv(t, "containerd", map[string]string{"open": "privileged"}, true)
	p := inNamespace(pod("ps-waits", "18860:80"), "open")
	guid := runSandbox(t, ctx, env, p)
	waitMetric(t, env, `nri_hcn_portmap_pods_failing{reason="PodSecurityLevelUnknown"}`, 1) // the start tried, and waits
	if err := harness.Consistently(ctx, 2*time.Second, func() error {
		if ep := endpointOf(t, ctx, env, p.ID); ep != nil {
			return fmt.Errorf("an endpoint %+v while the namespace's level is not known", ep)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := scrape(t, env)["nri_hcn_portmap_kubernetes_namespaces_synced"]; got != 0 {
		t.Errorf("namespaces_synced %v with the API server down, want 0", got)
	}
	must(t, k.RestartAPIServer(ctx))
	// each view lists again within its retry cap (config.APIRetryMax) of
	// the API server's return (the policy kinds asked again at once), and
	// the pod is synced when both are read
	for sample, want := range map[string]float64{"nri_hcn_portmap_kubernetes_namespaces_synced": 1,
		"nri_hcn_portmap_kubernetes_network_policies_synced": 1, "nri_hcn_portmap_kubernetes_network_policies_stale": 0} {
		if err := env.WaitMetric(ctx, sample, want, config.APIRetryMax+15*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	wantEndpoint(t, ctx, env, p.ID, guid, []hcn.PortMappingPolicy{tcp(18860, 80, "", 1)})
	if n := harness.Sum(scrape(t, env), "nri_hcn_portmap_pods_failing"); n != 0 {
		t.Errorf("%v pods failing once the held-back pod is mapped", n)
	}
}

// Issue 31: the default configuration (no [kubernetes]) cannot read a
// namespace's level: an annotated pod is refused, the error naming the way
// out; a hostPort pod is mapped (TestDefaultConfigMapsAPodOnAFreshNode).
func TestDefaultConfigRefusesTheAnnotationItCannotCheck(t *testing.T) {
	env, ctx := newEnv(t, "[plugin]\nresync_interval = \"0s\"\n")
	must(t, env.StartPlugin(ctx))
	p := pod("ps-default", "18870:80")
	_, err := env.RunPod(ctx, p)
	for _, want := range []string{"refused by the namespace's Pod Security level", "kubernetes.enabled = false", `admission.pod_security = "off"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("RunPodSandbox with the default configuration: %v, want it to say %q", err, want)
		}
	}
	wantNoEndpoint(t, ctx, env, p.ID)
}

// Issue 37: the cluster's default level cannot be read, so it grants
// nothing: an annotated pod in an unlabelled namespace gets no endpoint and
// is told why (the default level, baseline); once the operator says the
// cluster's default is privileged (admission.pod_security_default_level,
// reloaded), the next such pod is mapped.
func TestAnUnlabelledNamespaceGrantsNothingUnlessTold(t *testing.T) {
	env, k, ctx := podSecurityEnv(t, "containerd", map[string]string{"plain": ""}, false)
	waitMetric(t, env, "nri_hcn_portmap_kubernetes_namespaces_synced", 1)
	refused := inNamespace(pod("ps-plain-refused", "18880:80"), "plain")
	_, err := k.CreatePod(ctx, &refused, kubeNode, true)
	must(t, err)
	runSandbox(t, ctx, env, refused)
	wantSaid(t, ctx, k, refused, "Warning", "PortMappingFailed", []string{"PodSecurityForbidsHostPorts: ",
		`namespace "plain" enforces "baseline" (it has no pod-security.kubernetes.io/enforce label: admission.pod_security_default_level = "baseline")`},
		corev1.ConditionFalse, "PodSecurityForbidsHostPorts")
	wantNoEndpoint(t, ctx, env, refused.ID)
	cfg, err := os.ReadFile(env.ConfigPath)
	must(t, err)
	must(t, os.WriteFile(env.ConfigPath, []byte(strings.Replace(string(cfg), "[admission]\n", "[admission]\npod_security_default_level = \"privileged\"\n", 1)), 0o644))
	if out, _, err := env.Command(ctx, "reload"); err != nil {
		t.Fatalf("reload: %q %v", out, err)
	}
	granted := inNamespace(pod("ps-plain-granted", "18881:80"), "plain")
	guid := runSandbox(t, ctx, env, granted)
	wantEndpoint(t, ctx, env, granted.ID, guid, []hcn.PortMappingPolicy{tcp(18881, 80, "", 1)})
}

// Issue 37: labels read longer ago than kubernetes.labels_max_age while
// the API server cannot be read grant nothing new: a new annotated pod is
// held back (PodSecurityLevelUnknown), the metric and /healthz say the
// labels are stale, a pod mapped before keeps its endpoint; once the API
// server answers again, the held-back pod is mapped. (The NetworkPolicy
// check, off here, unmaps what it can no longer judge: its own test is
// TestTheAPIServerStoppedGrantsNothingNew.)
func TestStaleLabelsHoldNewAnnotationsBack(t *testing.T) {
	env, k, ctx := podSecurityEnv(t, "containerd", map[string]string{"open": "privileged"}, false, "labels_max_age = \"2s\"\n",
		"admission.network_policy = \"off\"\n")
	waitMetric(t, env, "nri_hcn_portmap_kubernetes_namespaces_synced", 1)
	mapped := inNamespace(pod("ps-stale-mapped", "18890:80"), "open")
	guid := runSandbox(t, ctx, env, mapped)
	before := wantEndpoint(t, ctx, env, mapped.ID, guid, []hcn.PortMappingPolicy{tcp(18890, 80, "", 1)})
	k.StopAPIServer()
	waitMetric(t, env, "nri_hcn_portmap_kubernetes_namespaces_stale", 1)
	if code, checks := health(t, env); code != 503 || !strings.Contains(checks["kubernetes namespaces"], "kubernetes.labels_max_age = 2s") {
		t.Errorf("/healthz %d %v, want the stale labels named", code, checks)
	}
	held := inNamespace(pod("ps-stale-held", "18891:80"), "open")
	heldNS := runSandbox(t, ctx, env, held)
	waitMetric(t, env, `nri_hcn_portmap_pods_failing{reason="PodSecurityLevelUnknown"}`, 1)
	if err := harness.Consistently(ctx, 2*time.Second, func() error {
		if ep := endpointOf(t, ctx, env, held.ID); ep != nil {
			return fmt.Errorf("an endpoint %+v while the labels are stale", ep)
		}
		if ep := endpointOf(t, ctx, env, mapped.ID); ep == nil || ep.Endpoint != before.Endpoint {
			return fmt.Errorf("the mapped pod's endpoint %+v, want %s kept", ep, before.Endpoint)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	must(t, k.RestartAPIServer(ctx))
	wantEndpoint(t, ctx, env, held.ID, heldNS, []hcn.PortMappingPolicy{tcp(18891, 80, "", 1)})
	waitMetric(t, env, "nri_hcn_portmap_kubernetes_namespaces_stale", 0)
}
