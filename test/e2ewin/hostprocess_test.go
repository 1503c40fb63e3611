//go:build e2ewin

package e2ewin

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cfgpkg "github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

// The security descriptors of a stock Windows Server node's folders, as
// SDDL (plugin/nodefs/sddl_test.go has the same, with their sources): C:\
// itself, and a folder or file a SYSTEM process made under it with a plain
// MkdirAll, as kubelet makes its root, pods and volume folders, which
// inherit C:\'s DACL at every depth: BUILTIN\Users may add files and
// folders to a folder, and only read a file.
const (
	sddlDriveRoot = "O:S-1-5-80-956008885-3418522649-1831038044-1853292631-2271478464D:PAI(A;OICIIO;GA;;;CO)(A;OICI;FA;;;SY)" +
		"(A;OICI;FA;;;BA)(A;OICI;0x1200a9;;;BU)(A;CI;LC;;;BU)(A;CIIO;DC;;;BU)"
	sddlKubeletFolder = "O:SYG:SYD:AI(A;ID;FA;;;SY)(A;OICIIOID;GA;;;CO)(A;OICIID;FA;;;SY)(A;OICIID;FA;;;BA)" +
		"(A;OICIID;0x1200a9;;;BU)(A;CIID;LC;;;BU)(A;CIID;DC;;;BU)"
	sddlKubeletFile = "O:SYG:SYD:AI(A;ID;FA;;;SY)(A;ID;FA;;;BA)(A;ID;0x1200a9;;;BU)"
)

// kubeletLayout lays out under root what a stock node gives the chart's
// HostProcess pod without the bind filter: the container's rootfs
// (hpc/<id>), its ConfigMap mount there as a link to kubelet's volume
// folder, and in it kubelet's atomic writer's files (config.toml ->
// ..data/config.toml, ..data -> the timestamped folder holding the file).
func kubeletLayout(t *testing.T, root, config string) {
	t.Helper()
	vol := filepath.Join(root, "var/lib/kubelet/pods/5e1f/volumes/kubernetes.io~configmap/config")
	ts := filepath.Join(vol, "..2026_12_04_17_57_38.123456789")
	etc := filepath.Join(root, "hpc/c0ffee/etc")
	for _, d := range []string{ts, etc} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ts, "config.toml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	for link, to := range map[string]string{filepath.Join(vol, "..data"): filepath.Base(ts),
		filepath.Join(vol, "config.toml"): "..data/config.toml", filepath.Join(etc, "nri-hcn-portmap"): vol} {
		if err := os.Symlink(to, link); err != nil {
			t.Fatal(err)
		}
	}
}

// modelExe builds the plugin with the test-only security model (build tag
// sddlmodel: wine keeps no ACLs, so the node's DACLs are read from a file
// named by NRI_HCN_PORTMAP_SDDL_MODEL).
func modelExe(t *testing.T, dir string) string {
	t.Helper()
	exe := filepath.Join(dir, "nri-hcn-portmap-sddlmodel.exe")
	build := exec.Command("go", "build", "-tags", "sddlmodel", "-o", exe, "./cmd/nri-hcn-portmap")
	build.Dir = "../.."
	build.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags sddlmodel: %v\n%s", err, out)
	}
	return exe
}

// Issues 47 and 53: the HostProcess DaemonSet starts on a stock node. A
// configuration file in a ConfigMap volume laid out as kubelet's atomic
// writer lays it out, with a folder Users may delete entries in, is
// refused, naming it (the file route, which a local user may re-point on
// a stock node: plugin/nodefs's table). The chart's own command line
// (`run`, its configuration in the environment kubelet resolves from the
// ConfigMap, the mount point set as hcsshim sets it) reaches ready on a
// node whose mount and ..data links Users may re-point.
func TestTheDaemonSetStartsOnKubeletsFolders(t *testing.T) {
	r := newRig(t)
	exe := modelExe(t, r.env.Dir)
	root := filepath.Join(r.env.Dir, "node")
	keyFile := strings.ReplaceAll(r.env.HostPath(filepath.Join(r.env.Dir, "admin", "admin.key")), `\`, `\\`) // where the commands look
	cfgText := "[containerd]\naddress = \"" + r.env.CtrTCP + "\"\n\n[admin]\nlisten = \"" + r.env.AdminAddr + "\"\nsocket = \"\"\nkey_file = \"" + keyFile + "\"\n\n" +
		"[plugin]\nresync_interval = \"0s\"\n" + harness.NetworkConfig
	kubeletLayout(t, root, cfgText)
	mountPoint := r.env.HostPath(filepath.Join(root, "hpc/c0ffee"))
	args := []string{"run", "--config", strings.ReplaceAll(`%CONTAINER_SANDBOX_MOUNT_POINT%\etc\nri-hcn-portmap\config.toml`,
		"%CONTAINER_SANDBOX_MOUNT_POINT%", mountPoint)}
	// the node's folders (what the walk passes on the way to the
	// ConfigMap, as C:\ and the folders kubelet made), modelled; the
	// admin key's folder, beside them, is the plugin's own (wine's
	// reading: its user's, as the service's folder is SYSTEM's)
	model := func(overrides map[string]string) []string {
		paths := map[string]string{`Z:\`: sddlDriveRoot, `Z:\run`: sddlKubeletFolder, r.env.HostPath(r.env.Dir): sddlKubeletFolder}
		for p, sddl := range overrides {
			paths[p] = sddl
		}
		m := map[string]any{"paths": paths, "under": []map[string]string{{"prefix": r.env.HostPath(root), "dir": sddlKubeletFolder, "file": sddlKubeletFile}}}
		data, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Join(r.env.Dir, "sddl-model.json")
		if err := os.WriteFile(name, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return []string{"NRI_HCN_PORTMAP_SDDL_MODEL=" + name}
	}

	// the volume folder, where Users may delete entries: refused, naming
	// it (wine shows the links as what they point to, so the volume
	// folder is read at the mount's path: the walk through the links
	// themselves is nodefs' TestCheckJudgesEveryObjectOnThePath)
	volume := mountPoint + `\etc\nri-hcn-portmap`
	if err := r.env.StartBinaryEnv("refused", model(map[string]string{volume: "O:SYG:SYD:(A;;FA;;;SY)(A;;FA;;;BA)(A;;0x1200e9;;;BU)"}),
		os.Getenv("WINE"), append([]string{exe}, args...)...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
	defer cancel()
	if err := r.env.Plugin.Wait(ctx); err != nil {
		t.Fatalf("the plugin with a folder Users may change did not exit: %v", err)
	}
	if tail := r.env.Plugin.Tail(20); !strings.Contains(tail, volume) || !strings.Contains(tail, `BUILTIN\Users`) ||
		!strings.Contains(tail, "delete or rename what it holds") {
		t.Fatalf("the refusal does not name the folder and who may change it:\n%s", tail)
	}

	// issue 53: the chart's command line (run, its configuration in the
	// environment, resolved by kubelet from the ConfigMap) on a node whose
	// mount and ..data carry what Windows gives a directory link, their
	// folder's container-inherit ACEs (Users may write them: re-point
	// them): ready, as nothing is read through them
	linkDACL := "O:SYG:SYD:AI(A;OICIID;FA;;;SY)(A;OICIID;FA;;;BA)(A;OICIID;0x1200a9;;;BU)(A;CIID;LC;;;BU)(A;CIID;DC;;;BU)"
	environ := append(model(map[string]string{volume: linkDACL, mountPoint: linkDACL}),
		cfgpkg.ConfigEnv+"="+cfgText, "CONTAINER_SANDBOX_MOUNT_POINT="+mountPoint)
	if err := r.env.StartBinaryEnv("plugin", environ, os.Getenv("WINE"), exe, "run"); err != nil {
		t.Fatal(err)
	}
	if err := r.env.WaitSubscribed(r.ctx, 1, 30*time.Second); err != nil {
		t.Fatalf("the DaemonSet's command line on kubelet's folders: %v\n%s", err, r.env.Plugin.Tail(30))
	}
	out, stderr, err := r.env.Command(r.ctx, "health")
	if err != nil || !strings.Contains(out, `"status": "ok"`) {
		t.Fatalf("health: %v\n%s%s", err, out, stderr)
	}
	web := r.pod("hostprocess-web", "18070:80")
	ns := r.run(web)
	r.wantEndpoint(web.ID, ns, toPort80(18070))
}
