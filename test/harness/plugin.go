// The plugin process and its commands (status, health, reload, cleanup).

package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/status"
)

// StartPlugin starts the plugin process against this environment and waits
// until the NRI runtime side has registered it.
func (e *Env) StartPlugin(ctx context.Context, extraArgs ...string) error {
	args := append(e.PluginArgs("run"), extraArgs...)
	return e.StartNRIPlugin(ctx, "plugin", e.PluginBin, args...)
}

// StartNRIPlugin starts any NRI plugin binary as e.Plugin and waits until
// the runtime side has registered it.
func (e *Env) StartNRIPlugin(ctx context.Context, name, bin string, args ...string) error {
	// drain stale sync signals
	for len(e.syncs) > 0 {
		<-e.syncs
	}
	p, err := start(name, filepath.Join(e.Dir, name+".log"), bin, args...)
	if err != nil {
		return err
	}
	e.Plugin = p
	select {
	case <-e.syncs:
	case <-p.done:
		return fmt.Errorf("plugin exited before registering: %s\n%s", p.Exited(), p.Tail(30))
	case <-time.After(20 * time.Second):
		return fmt.Errorf("plugin did not register with NRI within 20s\n%s", p.Tail(30))
	case <-ctx.Done():
		return ctx.Err()
	}
	// The plugin joins the runtime's list after the sync callback returns;
	// taking the sync lock waits for that.
	e.NRI.BlockPluginSync().Unblock()
	return nil
}

// StartPluginEvents starts the plugin with the containerd event source and
// waits until its subscription is live and the resync that follows it is
// over.
func (e *Env) StartPluginEvents(ctx context.Context, extraArgs ...string) error {
	return e.StartPluginSubscribing(ctx, append([]string{"--source", "containerd"}, extraArgs...)...)
}

// StartPluginSubscribing starts the plugin with its configured event
// source and waits as StartPluginEvents does (the Windows build's default,
// auto, is containerd's events).
func (e *Env) StartPluginSubscribing(ctx context.Context, extraArgs ...string) error {
	args := append(e.PluginArgs("run"), extraArgs...)
	p, err := start("plugin", filepath.Join(e.Dir, "plugin.log"), e.PluginBin, args...)
	if err != nil {
		return err
	}
	e.Plugin = p
	return e.WaitSubscribed(ctx, 1, 20*time.Second)
}

// StartBinary starts any binary with args as e.Plugin and does not wait
// for anything.
func (e *Env) StartBinary(name, bin string, args ...string) error {
	p, err := start(name, filepath.Join(e.Dir, name+".log"), bin, args...)
	if err != nil {
		return err
	}
	e.Plugin = p
	return nil
}

// StartBinaryEnv is StartBinary with env added to the process's
// environment.
func (e *Env) StartBinaryEnv(name string, env []string, bin string, args ...string) error {
	p, err := startEnv(env, name, filepath.Join(e.Dir, name+".log"), bin, args...)
	if err != nil {
		return err
	}
	e.Plugin = p
	return nil
}

// StartProcess starts the plugin binary with args as e.Plugin and does not
// wait for anything.
func (e *Env) StartProcess(_ context.Context, name string, args ...string) error {
	p, err := start(name, filepath.Join(e.Dir, name+".log"), e.PluginBin, args...)
	if err != nil {
		return err
	}
	e.Plugin = p
	return nil
}

// SubscribedResyncs is the metric counting the resyncs that follow each
// live subscription of the plugin process.
const SubscribedResyncs = `nri_hcn_portmap_reconcile_runs_total{trigger="subscribed"}`

// WaitSubscribed waits until the running plugin process has subscribed to
// containerd's events n times and finished the resync that follows each,
// so that what a test does next is seen through events only. It reads the
// plugin's metrics, not its log.
func (e *Env) WaitSubscribed(ctx context.Context, n int, d time.Duration) error {
	return e.WaitMetric(ctx, SubscribedResyncs, float64(n), d)
}

// PluginArgs are the arguments of a plugin command against this
// environment.
func (e *Env) PluginArgs(cmd string) []string {
	args := append(slices.Clone(e.pluginPre), cmd, "--config", e.HostPath(e.ConfigPath))
	// each command takes the flags of what it reads, no others
	hns := []string{"--hcn-backend", "simulated", "--hcn-simulator", e.SimAddress}
	ctr := e.CtrAddress
	if e.windows { // HNS (the emulator) is the default backend; containerd over TCP
		hns, ctr = nil, e.CtrTCP
	}
	// reload's channel, for the node's administrators: a unix socket here;
	// none under wine (its named pipes do not work for go-winio)
	sock := filepath.Join(e.Dir, "admin.sock")
	if e.windows {
		sock = ""
	}
	// where the running plugin answers, and the key its answers prove
	// themselves with (this environment's own: plugins of several
	// environments run at once)
	at := []string{"--admin-listen", e.AdminAddr, "--admin-key-file", e.HostPath(filepath.Join(e.Dir, "admin", "admin.key"))}
	if e.noAdminKey {
		at = at[:2]
	}
	switch cmd {
	case "health": // it only finds the running plugin
		return append(args, at...)
	case "reload":
		return append(args, "--admin-socket", sock)
	case "cleanup": // HNS, and where a running plugin would answer
		return append(append(args, hns...), at...)
	case "status": // HNS, containerd, and the running plugin (what the CNI maps)
		return append(append(append(args, hns...), "--containerd-address", ctr), at...)
	}
	args = append(append(append(args, hns...), "--containerd-address", ctr), at...)
	if cmd == "run" {
		args = append(args, "--admin-socket", sock)
	}
	if !e.windows {
		args = append(args, "--nri-socket", e.NRISocket)
	}
	return args
}

// HostPath is path as the plugin sees it: under wine, / is drive Z:.
func (e *Env) HostPath(path string) string {
	if e.windows {
		return `Z:` + strings.ReplaceAll(path, "/", `\`)
	}
	return path
}

// Command runs a plugin command (status, health, reload, cleanup) and
// returns its stdout, stderr and error.
func (e *Env) Command(ctx context.Context, cmd string, extra ...string) (string, string, error) {
	c := exec.CommandContext(ctx, e.PluginBin, append(e.PluginArgs(cmd), extra...)...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err := c.Run()
	return stdout.String(), stderr.String(), err
}

// Status runs `nri-hcn-portmap status -o json` against the simulator: the
// documented way to see what the plugin built, from outside its process.
func (e *Env) Status(ctx context.Context) ([]status.Entry, error) {
	cmd := exec.CommandContext(ctx, e.PluginBin, append(e.PluginArgs("status"), "-o", "json")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("status: %w: %s", err, stderr.String())
	}
	var entries []status.Entry
	if err := json.Unmarshal(out, &entries); err != nil {
		return nil, fmt.Errorf("status output: %w\n%s", err, out)
	}
	return entries, nil
}

// StatusTable runs `nri-hcn-portmap status` (table form).
func (e *Env) StatusTable(ctx context.Context) (string, error) {
	out, err := exec.CommandContext(ctx, e.PluginBin, e.PluginArgs("status")...).CombinedOutput()
	return string(out), err
}
