// Package deploy checks the Kubernetes manifests under deploy/: no cluster
// runs here, so they are decoded strictly into the Kubernetes API types and
// the fields that matter are checked, including that the ConfigMap holds a
// configuration the plugin accepts.
package deploy

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
)

const base = "../../deploy/kustomize/base"

func decode(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(base, file))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

func TestKustomizationListsEveryManifest(t *testing.T) {
	var k struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Namespace  string   `json:"namespace"`
		Resources  []string `json:"resources"`
		Images     []struct {
			Name    string `json:"name"`
			NewTag  string `json:"newTag"`
			NewName string `json:"newName"`
		} `json:"images"`
	}
	decode(t, "kustomization.yaml", &k)
	if k.Kind != "Kustomization" || k.Namespace != "nri-hcn-portmap" {
		t.Errorf("kustomization: %+v", k)
	}
	entries, err := os.ReadDir(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "kustomization.yaml" && strings.HasSuffix(e.Name(), ".yaml") && !slices.Contains(k.Resources, e.Name()) {
			t.Errorf("%s is not listed in kustomization.yaml", e.Name())
		}
	}
	for _, r := range k.Resources {
		if _, err := os.Stat(filepath.Join(base, r)); err != nil {
			t.Errorf("resource %s: %v", r, err)
		}
	}
	if len(k.Images) != 1 || k.Images[0].Name != "nri-hcn-portmap" {
		t.Errorf("images: %+v, want the nri-hcn-portmap image to be overridable", k.Images)
	}
}

func TestDaemonSet(t *testing.T) {
	var ds appsv1.DaemonSet
	decode(t, "daemonset.yaml", &ds)
	spec := ds.Spec.Template.Spec
	if ds.Kind != "DaemonSet" || ds.APIVersion != "apps/v1" {
		t.Errorf("kind %s %s", ds.APIVersion, ds.Kind)
	}
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
	if !reflectEqual(ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels) {
		t.Errorf("selector %v does not match template labels %v", ds.Spec.Selector.MatchLabels, ds.Spec.Template.Labels)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers", len(spec.Containers))
	}
	c := spec.Containers[0]
	if c.Image == "" || !slices.Contains(c.Command, "nri-hcn-portmap.exe") || len(c.Args) < 3 || c.Args[0] != "run" || c.Args[1] != "--config" {
		t.Fatalf("container %s: command %v args %v", c.Name, c.Command, c.Args)
	}
	// the --config path is the ConfigMap's key in the mounted volume
	cfgPath := "/" + strings.TrimPrefix(c.Args[2], "/")
	var mount *corev1.VolumeMount
	for i := range c.VolumeMounts {
		if strings.HasPrefix(cfgPath, c.VolumeMounts[i].MountPath+"/") {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil {
		t.Fatalf("--config %s is in no volume mount %v", c.Args[2], c.VolumeMounts)
	}
	var vol *corev1.Volume
	for i := range spec.Volumes {
		if spec.Volumes[i].Name == mount.Name {
			vol = &spec.Volumes[i]
		}
	}
	if vol == nil || vol.ConfigMap == nil || vol.ConfigMap.Name != "nri-hcn-portmap" {
		t.Fatalf("volume %s is not the nri-hcn-portmap ConfigMap: %+v", mount.Name, vol)
	}
	key := strings.TrimPrefix(cfgPath, mount.MountPath+"/")
	if !slices.ContainsFunc(vol.ConfigMap.Items, func(k corev1.KeyToPath) bool { return k.Path == key && k.Key == "config.toml" }) {
		t.Errorf("the ConfigMap volume does not put config.toml at %s", key)
	}
	// probes ask the admin address the configuration serves on
	cfg := configMapConfig(t)
	for name, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.Exec == nil || !slices.Contains(p.Exec.Command, "health") {
			t.Errorf("%s probe %+v: want `nri-hcn-portmap.exe health`", name, p)
			continue
		}
		if i := slices.Index(p.Exec.Command, "--admin-listen"); i < 0 || p.Exec.Command[i+1] != cfg.Admin.Listen {
			t.Errorf("%s probe %v does not ask %s", name, p.Exec.Command, cfg.Admin.Listen)
		}
	}
	if c.Resources.Limits.Memory().IsZero() {
		t.Error("no memory limit")
	}
}

func configMapConfig(t *testing.T) config.Config {
	t.Helper()
	var cm corev1.ConfigMap
	decode(t, "configmap.yaml", &cm)
	body, ok := cm.Data["config.toml"]
	if !ok {
		t.Fatal("the ConfigMap has no config.toml")
	}
	cfg := config.Default()
	if err := config.Decode("configmap.yaml:config.toml", []byte(body), &cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate("configmap.yaml:config.toml", nil); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestConfigMapHoldsAValidWindowsConfig(t *testing.T) {
	cfg := configMapConfig(t)
	if cfg.HCN.Backend != config.BackendWindows || cfg.Containerd.Address != `\\.\pipe\containerd-containerd` {
		t.Errorf("backend %q, containerd %q: want the Windows defaults", cfg.HCN.Backend, cfg.Containerd.Address)
	}
	if cfg.Log.File != "" {
		t.Error("in a pod the log goes to stdout (kubectl logs), not a file")
	}
	if !strings.HasPrefix(cfg.Admin.Listen, "127.0.0.1:") {
		t.Errorf("admin.listen %q: keep it on loopback", cfg.Admin.Listen)
	}
}

func TestNamespaceAllowsHostProcess(t *testing.T) {
	var ns corev1.Namespace
	decode(t, "namespace.yaml", &ns)
	if ns.Name != "nri-hcn-portmap" || ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("namespace %+v: HostProcess pods need the privileged level", ns.ObjectMeta)
	}
}

func reflectEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
