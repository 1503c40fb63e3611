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

	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

// What a stock node gives the documented service install (as SDDL;
// plugin/nodefs/sddl_test.go has them with their sources): C:\ProgramData,
// where BUILTIN\Users may add files and folders at every depth, and the
// folder New-Item makes in it, inheriting that.
const (
	sddlProgramData = "O:SYD:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICI;0x1200a9;;;BU)(A;CI;DCLCRPCR;;;BU)"
	sddlNewItem     = "O:BAG:SYD:AI(A;OICIID;FA;;;SY)(A;OICIID;FA;;;BA)(A;OICIIOID;GA;;;CO)(A;OICIID;0x1200a9;;;BU)(A;CIID;DCLCRPCR;;;BU)"
)

// Issue 53: the Windows service installed as docs/operating.md writes it
// starts. Its steps, run under wine on a ProgramData whose DACL is a stock
// node's (modelled: wine keeps no ACLs): the folder made with New-Item
// (inheriting Users' right to add files), the configuration written in it,
// then `service install --config`. Before the install the service's start
// (the command line install registers, with the log file a service
// defaults to) is refused, naming the folder and BUILTIN\Users: the
// failure the docs led to. After it the folder is the administrators',
// install said so, and the same start reaches ready and maps a pod.
func TestTheDocumentedServiceInstallStarts(t *testing.T) {
	r := newRig(t)
	wine := os.Getenv("WINE")
	exe := modelExe(t, r.env.Dir)
	// wine's C:\ProgramData, as the docs write it (wine sets ProgramData
	// itself, whatever the environment says)
	prefix := os.Getenv("WINEPREFIX")
	if prefix == "" {
		t.Fatal("WINEPREFIX must be set: run with make e2e-windows")
	}
	folder := filepath.Join(prefix, "drive_c", "ProgramData", "nri-hcn-portmap")
	if err := os.RemoveAll(folder); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(folder, 0o755); err != nil { // New-Item -ItemType Directory
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(folder) })
	keyFile := strings.ReplaceAll(r.env.HostPath(filepath.Join(r.env.Dir, "admin", "admin.key")), `\`, `\\`) // where the commands look
	cfgText := "[containerd]\naddress = \"" + r.env.CtrTCP + "\"\n\n[admin]\nlisten = \"" + r.env.AdminAddr + "\"\nsocket = \"\"\nkey_file = \"" + keyFile + "\"\n\n" +
		"[plugin]\nresync_interval = \"0s\"\n" + harness.NetworkConfig
	if err := os.WriteFile(filepath.Join(folder, "config.toml"), []byte(cfgText), 0o644); err != nil { // config default | Set-Content, then edited
		t.Fatal(err)
	}
	const winFolder = `C:\ProgramData\nri-hcn-portmap`
	modelFile := filepath.Join(r.env.Dir, "sddl-model.json")
	data, err := json.Marshal(map[string]any{"paths": map[string]string{`C:\ProgramData`: sddlProgramData, winFolder: sddlNewItem}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(modelFile, data, 0o644); err != nil {
		t.Fatal(err)
	}
	environ := []string{"NRI_HCN_PORTMAP_SDDL_MODEL=" + modelFile}
	// the service's start: its registered command line, and the log file
	// a service writes when log.file is not set
	start := []string{exe, "run", "--config", winFolder + `\config.toml`, "--log-file", winFolder + `\nri-hcn-portmap.log`}
	command := func(args ...string) (string, error) {
		c := exec.Command(wine, append([]string{exe}, args...)...)
		c.Env = append(os.Environ(), environ...)
		out, err := c.CombinedOutput()
		return string(out), err
	}

	if err := r.env.StartBinaryEnv("before-install", environ, wine, start...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(r.ctx, time.Minute)
	defer cancel()
	if err := r.env.Plugin.Wait(ctx); err != nil {
		t.Fatalf("the service's start in the folder New-Item made did not exit: %v", err)
	}
	if tail := r.env.Plugin.Tail(20); !strings.Contains(tail, winFolder) || !strings.Contains(tail, `BUILTIN\Users`) {
		t.Fatalf("before install, the start's refusal does not name the folder and BUILTIN\\Users:\n%s", tail)
	}

	out, err := command("service", "install", "--config", winFolder+`\config.toml`)
	t.Cleanup(func() { _, _ = command("service", "uninstall") })
	if err != nil || !strings.Contains(out, winFolder+" is now the administrators' own") || !strings.Contains(out, `BUILTIN\Users`) {
		t.Fatalf("service install: %v\n%s", err, out)
	}
	if err := r.env.StartBinaryEnv("service", environ, wine, start...); err != nil {
		t.Fatal(err)
	}
	if err := r.env.WaitSubscribed(r.ctx, 1, 30*time.Second); err != nil {
		t.Fatalf("the installed service's start: %v\n%s", err, r.env.Plugin.Tail(30))
	}
	if out, stderr, err := r.env.Command(r.ctx, "health"); err != nil || !strings.Contains(out, `"status": "ok"`) {
		t.Fatalf("health: %v\n%s%s", err, out, stderr)
	}
	web := r.pod("service-web", "18071:80")
	ns := r.run(web)
	r.wantEndpoint(web.ID, ns, toPort80(18071))
}
