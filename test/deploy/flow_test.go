package deploy

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

// helmOn runs helm against the API server of kubeconfig.
func helmOn(t *testing.T, ctx context.Context, kubeconfig string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, helmBin(t), append(args, "--kubeconfig", kubeconfig)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helm %v: %v\n%s%s", args, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// startKube starts etcd and a kube-apiserver for the test, stopped when it
// ends, and returns them with the admin's kubeconfig.
func startKube(t *testing.T, ctx context.Context) (*harness.Kube, string) {
	t.Helper()
	k, err := harness.StartKube(ctx, t.TempDir())
	if k != nil {
		t.Cleanup(k.Stop)
	}
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := k.AdminKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	return k, kubeconfig
}

// Issue 25: the README's install, uninstall and a second release, with the
// real helm against a real kube-apiserver (no nodes: what is checked is
// what helm and the API server do with the chart's objects). The namespace
// is the operator's: created and labelled as the README says, kept by
// helm uninstall; the cleanup comes in an upgrade of the same release and
// uses the same configuration; two releases do not collide.
func TestInstallUninstallFlow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	k, kubeconfig := startKube(t, ctx)
	const ns, release = "nri-hcn-portmap", "nri-hcn-portmap"
	// README: kubectl create namespace, kubectl label namespace
	if _, err := k.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "privileged"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	out := helmOn(t, ctx, kubeconfig, "install", release, chart, "-n", ns)
	for _, want := range []string{"rollout status daemonset/nri-hcn-portmap", "nri-hcn-portmap.exe status", "http://<node address>:9467/metrics"} {
		if !strings.Contains(out, want) {
			t.Errorf("install NOTES do not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "not filtered by any NetworkPolicy") || !strings.Contains(out, "config.admission.networkPolicy=kubernetes") {
		t.Errorf("install NOTES of the default chart do not say its host ports obey NetworkPolicy:\n%s", out)
	}
	ds, err := k.Admin.AppsV1().DaemonSets(ns).Get(ctx, "nri-hcn-portmap", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"app.kubernetes.io/instance": release, "app.kubernetes.io/managed-by": "Helm",
		"helm.sh/chart": "nri-hcn-portmap-" + appVersion, "app.kubernetes.io/component": "plugin"} {
		if ds.Labels[key] != want || (key != "helm.sh/chart" && key != "app.kubernetes.io/managed-by" && ds.Spec.Selector.MatchLabels[key] != want) {
			t.Errorf("label %s: %q on the DaemonSet, %q in its selector; want %q", key, ds.Labels[key], ds.Spec.Selector.MatchLabels[key], want)
		}
	}
	cm, err := k.Admin.CoreV1().ConfigMaps(ns).Get(ctx, "nri-hcn-portmap", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// a second release in the same namespace: its own objects and selector
	out = helmOn(t, ctx, kubeconfig, "install", "canary", chart, "-n", ns, "--set", "kubernetes.enabled=false", "--set", "config.admission.podSecurity=off",
		"--set", "config.admission.networkPolicy=off")
	// issue 52: the open mode said in the plugin's words (run and doctor say the same)
	if !strings.Contains(strings.Join(strings.Fields(out), " "), config.NetworkPolicyOffSays) {
		t.Errorf("install NOTES with config.admission.networkPolicy=off do not say %q:\n%s", config.NetworkPolicyOffSays, out)
	}

	canary, err := k.Admin.AppsV1().DaemonSets(ns).Get(ctx, "canary-nri-hcn-portmap", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if canary.Spec.Selector.MatchLabels["app.kubernetes.io/instance"] != "canary" {
		t.Errorf("the second release's selector %v would take the first's pods", canary.Spec.Selector.MatchLabels)
	}
	helmOn(t, ctx, kubeconfig, "uninstall", "canary", "-n", ns)

	// uninstall, step 1: the same release becomes the cleanup
	out = helmOn(t, ctx, kubeconfig, "upgrade", release, chart, "-n", ns, "--reuse-values",
		"--set", "daemonset.enabled=false", "--set", "cleanup.enabled=true")
	if !strings.Contains(out, "rollout status daemonset/nri-hcn-portmap-cleanup") {
		t.Errorf("upgrade NOTES do not say how to wait for the cleanup:\n%s", out)
	}
	if _, err := k.Admin.AppsV1().DaemonSets(ns).Get(ctx, "nri-hcn-portmap", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the plugin's DaemonSet after the upgrade: %v, want it gone", err)
	}
	cleanup, err := k.Admin.AppsV1().DaemonSets(ns).Get(ctx, "nri-hcn-portmap-cleanup", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := cleanup.Spec.Template.Spec.Containers[0]; !strings.Contains(strings.Join(c.Args, " "), `nri-hcn-portmap.exe cleanup &&`) || c.ReadinessProbe == nil {
		t.Errorf("cleanup container %v, readiness %v: want the cleanup, then ready", c.Args, c.ReadinessProbe)
	}
	// the plugin's configuration, from its ConfigMap through the
	// environment (issue 53), as the plugin's own pods read it
	checkConfigFromEnv(t, *cleanup)
	cm2, err := k.Admin.CoreV1().ConfigMaps(ns).Get(ctx, "nri-hcn-portmap", metav1.GetOptions{})
	if err != nil || cm2.Data["config.toml"] != cm.Data["config.toml"] {
		t.Errorf("the configuration changed in the upgrade to cleanup (%v): it must find what the plugin built", err)
	}

	// step 2: uninstall; the namespace is the operator's and stays
	helmOn(t, ctx, kubeconfig, "uninstall", release, "-n", ns)
	for what, err := range map[string]error{
		"DaemonSet":   get(k.Admin.AppsV1().DaemonSets(ns).Get(ctx, "nri-hcn-portmap-cleanup", metav1.GetOptions{})),
		"ConfigMap":   get(k.Admin.CoreV1().ConfigMaps(ns).Get(ctx, "nri-hcn-portmap", metav1.GetOptions{})),
		"ClusterRole": get(k.Admin.RbacV1().ClusterRoles().Get(ctx, "nri-hcn-portmap", metav1.GetOptions{})),
	} {
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s after uninstall: %v, want it gone", what, err)
		}
	}
	if _, err := k.Admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		t.Errorf("the namespace after uninstall: %v; it is the operator's to delete", err)
	}
}

func get[T any](_ T, err error) error { return err }
