//go:build !windows

package e2e

import (
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Issue 37: what changes what the plugin does belongs to the node's
// administrators. reload is answered on admin.socket alone: a user other
// than root is refused (the socket's folder is root's alone, and a peer
// that reaches the socket anyway is hung up on), root reloads, and POST
// /reload on the loopback listener, which every local user reaches, is
// refused. A configuration file others may change is refused at a reload
// (the configuration in force stays) and at start, naming the file and
// who may change it.
func TestReloadIsForTheNodesAdministratorsAlone(t *testing.T) {
	env, ctx := startEnv(t)
	nobody := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	// a copy of the binary every user may run
	shared, err := os.MkdirTemp("", "hcnpm-shared-")
	must(t, err)
	t.Cleanup(func() { os.RemoveAll(shared) })
	must(t, os.Chmod(shared, 0o755))
	bin := filepath.Join(shared, "nri-hcn-portmap")
	data, err := os.ReadFile(env.PluginBin)
	must(t, err)
	must(t, os.WriteFile(bin, data, 0o755))
	sock := filepath.Join(env.Dir, "admin.sock")
	asNobody := func() (string, error) {
		cmd := exec.CommandContext(ctx, bin, "reload", "--config", "", "--admin-socket", sock)
		cmd.SysProcAttr = nobody
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := asNobody(); err == nil || !strings.Contains(out, "admin.socket is for the node's administrators") {
		t.Fatalf("reload as nobody: %v %q, want refused", err, out)
	}
	// the socket reachable by its mode: the plugin still hangs up on nobody
	must(t, os.Chmod(env.Dir, 0o755))
	must(t, os.Chmod(sock, 0o666))
	if out, err := asNobody(); err == nil || !strings.Contains(out, "admin.socket is for the node's administrators") {
		t.Fatalf("reload as nobody through an open socket: %v %q, want hung up on", err, out)
	}
	must(t, os.Chmod(env.Dir, 0o700))
	if out, _, err := env.Command(ctx, "reload"); err != nil || !strings.HasPrefix(out, "reloaded: ") {
		t.Fatalf("reload as root: %q, %v", out, err)
	}
	res, err := http.Post("http://"+env.AdminAddr+"/reload", "application/json", nil)
	must(t, err)
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("POST /reload on admin.listen from loopback: %s, want 403", res.Status)
	}
	if got := scrape(t, env)[`nri_hcn_portmap_config_reloads_total{result="applied"}`]; got != 1 {
		t.Fatalf("%v reloads applied, want 1 (root's)", got)
	}

	// a configuration file every user may write
	must(t, os.Chmod(env.ConfigPath, 0o666))
	_, stderr, err := env.Command(ctx, "reload")
	if err == nil || !strings.Contains(stderr, env.ConfigPath) || !strings.Contains(stderr, "every user (mode 0666)") {
		t.Fatalf("reload of a world-writable file: %v %q, want refused naming the file and who", err, stderr)
	}
	start := exec.CommandContext(ctx, env.PluginBin, append(env.PluginArgs("run"), "--admin-listen", "", "--admin-socket", "")...)
	out, err := start.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), env.ConfigPath+" may be changed by others than the node's administrators: every user (mode 0666)") {
		t.Fatalf("start with a world-writable file: %v\n%s", err, out)
	}
}
