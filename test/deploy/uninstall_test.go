package deploy

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

// released is the chart as the README and NOTES.txt name it, from the
// release's OCI registry, which these tests cannot reach: it is the one
// word of the commands replaced (by the chart in this tree).
var released = regexp.MustCompile(`oci://ghcr\.io/nri-hcn-portmap/charts/nri-hcn-portmap --version \S+`)

// assignment is a shell variable the docs' commands set (CHART, the
// chart's address, so a mirror changes one word): kept for the commands
// after it, as an operator's shell keeps it, the released chart replaced.
var assignment = regexp.MustCompile(`^([A-Z_]+)=(\S+)$`)

// shellOf is a bash that runs the docs' commands as an operator's shell
// would: helm and kubectl on PATH, the cluster in KUBECONFIG.
type shellOf struct {
	t          *testing.T
	k          *harness.Kube
	env        []string
	kubeconfig string
}

func newShell(t *testing.T, k *harness.Kube) *shellOf {
	t.Helper()
	kubeconfig, err := k.AdminKubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	for name, target := range map[string]string{"helm": helmBin(t), "kubectl": kubectlBin(t)} {
		if err := os.Symlink(target, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	return &shellOf{t: t, k: k, kubeconfig: kubeconfig,
		env: append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBECONFIG="+kubeconfig)}
}

// run runs one command as written (the released chart aside), acting as
// the controllers no test cluster runs where the command waits for one.
func (sh *shellOf) run(ctx context.Context, command string) string {
	sh.t.Helper()
	if m := assignment.FindStringSubmatch(command); m != nil {
		v := m[2]
		if v == "oci://ghcr.io/nri-hcn-portmap/charts/nri-hcn-portmap" {
			v = chart
		}
		sh.env = append(sh.env, m[1]+"="+v)
		return ""
	}
	command = released.ReplaceAllString(command, chart)
	fields := strings.Fields(command)
	stop := make(chan struct{})
	defer close(stop)
	switch {
	case len(fields) >= 4 && fields[0] == "kubectl" && strings.Contains(command, "rollout status daemonset/"):
		ns, name := fields[2], strings.TrimPrefix(fields[len(fields)-1], "daemonset/")
		sh.daemonSetRolledOut(ctx, ns, name)
	case len(fields) == 4 && fields[0] == "kubectl" && fields[1] == "delete" && fields[2] == "namespace":
		go sh.finalizeNamespace(ctx, fields[3], stop)
	}
	cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, "bash", "-c", command)
	cmd.Env = sh.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		sh.t.Fatalf("%s: %v\n%s", command, err, out)
	}
	return string(out)
}

// daemonSetRolledOut writes a DaemonSet's status as its controller does
// once every node's pod is up to date and ready (no controller-manager and
// no nodes run here).
func (sh *shellOf) daemonSetRolledOut(ctx context.Context, ns, name string) {
	sh.t.Helper()
	ds, err := sh.k.Admin.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		sh.t.Fatalf("the command waits for DaemonSet %s/%s: %v", ns, name, err)
	}
	ds.Status = appsv1.DaemonSetStatus{ObservedGeneration: ds.Generation, DesiredNumberScheduled: 2, CurrentNumberScheduled: 2,
		UpdatedNumberScheduled: 2, NumberReady: 2, NumberAvailable: 2}
	if _, err := sh.k.Admin.AppsV1().DaemonSets(ns).UpdateStatus(ctx, ds, metav1.UpdateOptions{}); err != nil {
		sh.t.Fatal(err)
	}
}

// finalizeNamespace does the namespace controller's last step once the
// namespace is being deleted.
func (sh *shellOf) finalizeNamespace(ctx context.Context, name string, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
		ns, err := sh.k.Admin.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if err != nil || ns.DeletionTimestamp == nil {
			continue
		}
		ns.Spec.Finalizers = nil
		_, _ = sh.k.Admin.CoreV1().Namespaces().Finalize(ctx, ns, metav1.UpdateOptions{})
	}
}

// commands are the shell commands of text: lines, continuations joined,
// comments and blank lines dropped, indentation trimmed.
func commands(text string) []string {
	var out []string
	cur := ""
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if i := strings.Index(line, " #"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if more, ok := strings.CutSuffix(line, `\`); ok {
			cur += more
			continue
		}
		out = append(out, cur+line)
		cur = ""
	}
	return out
}

// readmeBlock is the first sh block after heading in the README.
func readmeBlock(t *testing.T, heading string) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, "\n"+heading+"\n")
	if i < 0 {
		t.Fatalf("README has no %q", heading)
	}
	s = s[i:]
	start := strings.Index(s, "```sh\n")
	end := strings.Index(s[start+6:], "```")
	if start < 0 || end < 0 {
		t.Fatalf("no sh block under %q", heading)
	}
	return commands(s[start+6 : start+6+end])
}

// Issue 32: both uninstall routes an operator is given, run as written
// against a real kube-apiserver: the README's and the one NOTES.txt prints
// after an install. The install has values of its own (a registry, a
// configuration, the firewall rule): the cleanup must carry them (helm
// upgrade without --reuse-values would reset them: the cleanup would pull
// the default image and read the default configuration), then everything
// goes. The README's install runs as written too.
func TestUninstallRoutesAsWritten(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	k, _ := startKube(t, ctx)
	sh := newShell(t, k)
	const ns = "nri-hcn-portmap"
	const image = "registry.example/team/nri-hcn-portmap"
	ours := []string{"--set", "image.registry=registry.example", "--set", "image.repository=team/nri-hcn-portmap", "--set", "config.network=pods-nat"}

	t.Run("README", func(t *testing.T) {
		sh.t = t
		install := readmeBlock(t, "### As a HostProcess DaemonSet (Helm)")
		for _, c := range install {
			if strings.HasPrefix(c, "helm install") {
				c += " " + strings.Join(ours, " ") // the README's private-registry variant, and a configuration
			}
			sh.run(ctx, c)
		}
		before := cleanupCarries(t, ctx, k, ns, "nri-hcn-portmap", image, false, true)
		uninstall := readmeBlock(t, "## Uninstall")
		if len(uninstall) != 5 || !strings.HasPrefix(uninstall[0], "CHART=") {
			t.Fatalf("README's uninstall: %q", uninstall)
		}
		sh.run(ctx, uninstall[0]) // where the chart is
		uninstall = uninstall[1:]
		sh.run(ctx, uninstall[0])                                                    // the release becomes the cleanup
		after := cleanupCarries(t, ctx, k, ns, "nri-hcn-portmap", image, true, true) // the README installs with metrics.firewallRule=true
		if before != after {
			t.Errorf("the cleanup's configuration is not the plugin's:\n%s\nwant\n%s", after, before)
		}
		for _, c := range uninstall[1:] {
			sh.run(ctx, c)
		}
		if _, err := k.Admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the namespace after the README's uninstall: %v", err)
		}
	})

	t.Run("NOTES", func(t *testing.T) {
		sh.t = t
		sh.run(ctx, "kubectl create namespace "+ns)
		sh.run(ctx, "kubectl label namespace "+ns+" pod-security.kubernetes.io/enforce=privileged")
		notes := sh.run(ctx, fmt.Sprintf("helm install portmap %s -n %s %s", chart, ns, strings.Join(ours, " ")))
		_, tail, ok := strings.Cut(notes, "\nUninstall:")
		if !ok {
			t.Fatalf("the install's NOTES say nothing of uninstalling:\n%s", notes)
		}
		steps := commands(tail[strings.Index(tail, "\n"):])
		if len(steps) != 4 || !strings.HasPrefix(steps[0], "CHART=") {
			t.Fatalf("NOTES' uninstall: %q", steps)
		}
		before := cleanupCarries(t, ctx, k, ns, "portmap-nri-hcn-portmap", image, false, false)
		sh.run(ctx, steps[0])
		sh.run(ctx, steps[1])
		steps = steps[1:]
		if after := cleanupCarries(t, ctx, k, ns, "portmap-nri-hcn-portmap", image, true, false); before != after {
			t.Errorf("the cleanup's configuration is not the plugin's:\n%s\nwant\n%s", after, before)
		}
		for _, c := range steps[1:] {
			sh.run(ctx, c)
		}
		for what, err := range map[string]error{
			"DaemonSet": get(k.Admin.AppsV1().DaemonSets(ns).Get(ctx, "portmap-nri-hcn-portmap-cleanup", metav1.GetOptions{})),
			"ConfigMap": get(k.Admin.CoreV1().ConfigMaps(ns).Get(ctx, "portmap-nri-hcn-portmap", metav1.GetOptions{})),
		} {
			if !apierrors.IsNotFound(err) {
				t.Errorf("%s after NOTES' uninstall: %v, want it gone", what, err)
			}
		}
	})
}

// cleanupCarries checks the release's state: before the uninstall (cleanup
// false) the plugin's DaemonSet with image; after its first step the
// cleanup's alone, with image, and the ConfigMap. It returns the
// configuration the DaemonSet reads. firewall: the install added the
// metrics port's firewall rule, which the cleanup must remove.
func cleanupCarries(t *testing.T, ctx context.Context, k *harness.Kube, ns, name, image string, cleanup, firewall bool) string {
	t.Helper()
	dsName := name
	if cleanup {
		dsName += "-cleanup"
		if _, err := k.Admin.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the plugin's DaemonSet during the cleanup: %v, want it gone", err)
		}
	}
	ds, err := k.Admin.AppsV1().DaemonSets(ns).Get(ctx, dsName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := ds.Spec.Template.Spec.Containers[0]
	if !strings.HasPrefix(c.Image, image+":") {
		t.Errorf("%s runs %q, want the install's %s", dsName, c.Image, image)
	}
	if cleanup && strings.Contains(strings.Join(c.Args, " "), "Remove-NetFirewallRule") != firewall {
		t.Errorf("the cleanup removes the firewall rule: %v, want %v (the install's metrics.firewallRule)", !firewall, firewall)
	}
	cm, err := k.Admin.CoreV1().ConfigMaps(ns).Get(ctx, configMapOf(*ds), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	if err := config.Decode("ConfigMap", []byte(cm.Data["config.toml"]), &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.HCN.Network != "pods-nat" {
		t.Errorf("%s reads network %q, want the install's pods-nat", dsName, cfg.HCN.Network)
	}
	return cm.Data["config.toml"]
}
