package deploy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
)

// kubectlBin is the kubectl make kube builds (KUBECTL_BIN).
func kubectlBin(t *testing.T) string {
	return tool(t, "KUBECTL_BIN", "kubectl-v1.37.2", "run `make kube`")
}

// kustomizeBuild renders dir with kubectl's kustomize, as kubectl apply -k
// would.
func kustomizeBuild(t *testing.T, dir string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, kubectlBin(t), "kustomize", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, out)
	}
	return out
}

// overlay writes an operator's overlay of the base, with their registry
// and configuration (docs/operating.md's example: a configMapGenerator
// that replaces the base's config.toml), and with components.
func overlay(t *testing.T, network string, components ...string) string {
	t.Helper()
	return overlayIn(t, "nri-hcn-portmap", network, components...)
}

// overlayIn is overlay with the overlay's namespace.
func overlayIn(t *testing.T, namespace, network string, components ...string) string {
	t.Helper()
	root, err := filepath.Abs(kustomize)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rel := func(p string) string { // kustomize takes no absolute roots
		r, err := filepath.Rel(dir, filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	body := `namespace: ` + namespace + `
resources: [` + rel("base") + `]
images: [{name: ghcr.io/nri-hcn-portmap/nri-hcn-portmap, newName: registry.example/team/nri-hcn-portmap, newTag: v9.9.9}]
configMapGenerator:
  - name: nri-hcn-portmap
    namespace: nri-hcn-portmap
    behavior: replace
    files: [config.toml]
`
	cfg := `[hcn]
backend = "windows"
network = "` + network + `"
[containerd]
address = '\\.\pipe\containerd-containerd'
[kubernetes]
enabled = true
[admin]
listen = "127.0.0.1:9466"
`
	if len(components) > 0 {
		var rels []string
		for _, c := range components {
			rels = append(rels, rel(c))
		}
		body += "components: [" + strings.Join(rels, ", ") + "]\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Issue 32: the kustomize route. The base renders the chart's defaults; an
// operator's overlay with a registry and a configuration gives the plugin
// its image and config; the same overlay with the cleanup component gives
// the cleanup DaemonSet that image and that ConfigMap, and no plugin
// DaemonSet (the cleanup as it was, a Kustomization of its own, rendered
// the chart's default image and ignored the overlay's configuration).
func TestKustomizeOverlayCarriesImageAndConfig(t *testing.T) {
	base := decodeAll(t, kustomizeBuild(t, filepath.Join(kustomize, "base")))
	if len(base.daemonSets) != 1 || base.daemonSets[0].Spec.Template.Spec.Containers[0].Image != "ghcr.io/nri-hcn-portmap/nri-hcn-portmap:"+appVersion {
		t.Fatalf("base: %d DaemonSets, image %q", len(base.daemonSets), base.daemonSets[0].Spec.Template.Spec.Containers[0].Image)
	}
	const image = "registry.example/team/nri-hcn-portmap:v9.9.9"
	installed := decodeAll(t, kustomizeBuild(t, overlay(t, "pods-nat")))
	if len(installed.daemonSets) != 1 || installed.daemonSets[0].Spec.Template.Spec.Containers[0].Image != image {
		t.Fatalf("overlay: %+v", installed.daemonSets)
	}
	uninstall := decodeAll(t, kustomizeBuild(t, overlay(t, "pods-nat", "cleanup")))
	if len(uninstall.daemonSets) != 1 || uninstall.daemonSets[0].Name != "nri-hcn-portmap-cleanup" {
		names := []string{}
		for _, ds := range uninstall.daemonSets {
			names = append(names, ds.Name)
		}
		t.Fatalf("overlay with the cleanup: DaemonSets %v, want the cleanup's alone", names)
	}
	cleanup := uninstall.daemonSets[0]
	if img := cleanup.Spec.Template.Spec.Containers[0].Image; img != image {
		t.Errorf("the cleanup runs %q, want the overlay's %q", img, image)
	}
	if len(uninstall.configMaps) != 1 {
		t.Fatalf("%d ConfigMaps", len(uninstall.configMaps))
	}
	cfg := config.Default()
	if err := config.Decode("ConfigMap", []byte(uninstall.configMaps[0].Data["config.toml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.HCN.Network != "pods-nat" {
		t.Errorf("the cleanup's configuration has network %q, want the overlay's pods-nat", cfg.HCN.Network)
	}
	if got := configMapOf(cleanup); got != uninstall.configMaps[0].Name {
		t.Errorf("the cleanup's configuration comes from ConfigMap %q, not the overlay's %s", got, uninstall.configMaps[0].Name)
	}
}

// Issue 39: kustomize rolls the plugin on a configuration change and keeps
// the cluster-wide policies apart. The ConfigMap is generated from
// config.toml with its content's hash in its name, which the DaemonSet's
// environment names: two configurations give two pod templates (a rollout), the
// same one the same; no object says Helm manages it; the base installs no
// ValidatingAdmissionPolicy, the admission-policies component both, with
// their bindings.
func TestKustomizeRollsOnConfigAndKeepsThePoliciesApart(t *testing.T) {
	build := func(network string, components ...string) objects {
		return decodeAll(t, kustomizeBuild(t, overlay(t, network, components...)))
	}
	a, again, b := build("pods-nat"), build("pods-nat"), build("other-nat")
	name := func(o objects) string {
		if len(o.configMaps) != 1 || len(o.daemonSets) != 1 {
			t.Fatalf("%d ConfigMaps, %d DaemonSets", len(o.configMaps), len(o.daemonSets))
		}
		if got := configMapOf(o.daemonSets[0]); got != o.configMaps[0].Name {
			t.Fatalf("the DaemonSet's configuration comes from ConfigMap %q, not the generated %s", got, o.configMaps[0].Name)
		}
		return o.configMaps[0].Name
	}
	if n := name(a); !strings.HasPrefix(n, "nri-hcn-portmap-") || n == "nri-hcn-portmap" {
		t.Errorf("ConfigMap %q: want the generator's hash-suffixed name", n)
	}
	if name(a) != name(again) || name(a) == name(b) {
		t.Errorf("ConfigMap names %s, %s (same configuration), %s (another): want the same, then another (a rollout)", name(a), name(again), name(b))
	}
	raw := string(kustomizeBuild(t, overlay(t, "pods-nat", "components/admission-policies")))
	for _, helm := range []string{"managed-by: Helm", "helm.sh/chart", "checksum/config"} {
		if strings.Contains(raw, helm) {
			t.Errorf("the kustomize manifests carry %q", helm)
		}
	}
	if len(a.policies)+len(a.policyBindings) != 0 {
		t.Errorf("the base installs %d admission policies and %d bindings: they are a component's", len(a.policies), len(a.policyBindings))
	}
	with := decodeAll(t, []byte(raw))
	if len(with.policies) != 2 || len(with.policyBindings) != 2 {
		t.Errorf("with the component: %d policies, %d bindings; want 2 and 2", len(with.policies), len(with.policyBindings))
	}
}

// Issue 48: applying the same overlay again changes nothing: kubectl
// apply -k reports every object unchanged (the admission policies were
// "configured" on every run, their manifests lacking what the API server
// fills in), and --prune with the base's label, as docs/operating.md
// says, removes the ConfigMap a changed configuration left behind.
func TestKustomizeApplyTwiceChangesNothingAndPruneTakesTheOldConfig(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	k, _ := startKube(t, ctx)
	sh := newShell(t, k)
	sh.run(ctx, "kubectl create namespace nri-hcn-portmap")
	first := overlay(t, "pods-nat", "components/admission-policies")
	sh.run(ctx, "kubectl apply -k "+first)
	again := sh.run(ctx, "kubectl apply -k "+first)
	var changed []string
	for _, line := range strings.Split(strings.TrimSpace(again), "\n") {
		if !strings.HasSuffix(line, " unchanged") {
			changed = append(changed, line)
		}
	}
	if len(changed) > 0 {
		t.Errorf("the same overlay applied again:\n%s", strings.Join(changed, "\n"))
	}
	// a changed configuration, applied with the prune the docs give
	prune := docsPrune(t)
	second := overlay(t, "other-nat", "components/admission-policies")
	sh.run(ctx, "kubectl apply -k "+second+" "+prune)
	cms, err := k.Admin.CoreV1().ConfigMaps("nri-hcn-portmap").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ours []string
	for _, cm := range cms.Items {
		if strings.HasPrefix(cm.Name, "nri-hcn-portmap-") {
			ours = append(ours, cm.Name)
		}
	}
	if len(ours) != 1 {
		t.Errorf("after kubectl apply -k %s: ConfigMaps %v, want the new configuration's alone", prune, ours)
	}
	pols, err := k.Admin.AdmissionregistrationV1().ValidatingAdmissionPolicies().List(ctx, metav1.ListOptions{})
	if err != nil || len(pols.Items) != 2 {
		t.Errorf("after the prune: %d admission policies (%v), want both kept", len(pols.Items), err)
	}
}

// docsPrune is the prune docs/operating.md gives kubectl apply -k.
func docsPrune(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("kubectl apply -k overlay (--prune [^`\n]+)").FindStringSubmatch(string(b))
	if m == nil {
		t.Fatal("docs/operating.md gives no kubectl apply -k overlay --prune ...")
	}
	return m[1]
}

// Issue 55: the image your own build pushes is the one the chart's and the
// overlay's documented settings pull: deploy/Dockerfile's tag, the
// chart rendered with docs/operating.md's --set image.* flags, and the
// overlay's images entry name one repository (followed together, they
// gave ImagePullBackOff).
func TestTheOwnBuildsImageIsTheOneTheDocsPull(t *testing.T) {
	df, err := os.ReadFile(filepath.Join(chart, "..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	built := regexp.MustCompile(`-t (\S+):\S+ --push`).FindStringSubmatch(string(df))
	ops, err := os.ReadFile(filepath.Join(chart, "..", "..", "..", "docs", "operating.md"))
	if err != nil {
		t.Fatal(err)
	}
	helmLine := regexp.MustCompile(`(?m)^  (--set image\.\S+ ?)+$`).FindString(string(ops))
	overlayName := regexp.MustCompile(`images: \[\{name: \S+, newName: (\S+), newTag: \S+\}\]`).FindStringSubmatch(string(ops))
	if built == nil || helmLine == "" || overlayName == nil {
		t.Fatalf("Dockerfile tag %v, helm line %q, overlay %v: one is not written", built, helmLine, overlayName)
	}
	var set []string
	for _, f := range strings.Fields(helmLine) {
		if f != "--set" {
			set = append(set, f)
		}
	}
	var ds []string
	for _, doc := range strings.Split(string(render(t, "nri-hcn-portmap", append(set, "--show-only=templates/daemonset.yaml")...)), "\n") {
		if img, ok := strings.CutPrefix(strings.TrimSpace(doc), "image: "); ok {
			ds = append(ds, strings.Trim(img, `"`))
		}
	}
	if len(ds) == 0 {
		t.Fatal("the DaemonSet names no image")
	}
	for _, img := range ds {
		repo := img[:strings.LastIndex(img, ":")]
		if repo != built[1] || overlayName[1] != built[1] {
			t.Errorf("the Dockerfile pushes %s; the chart with %q pulls %s; the overlay names %s", built[1], helmLine, img, overlayName[1])
		}
	}
}
