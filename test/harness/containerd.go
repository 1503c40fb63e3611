// The containerd daemon: its config, start and restart.

package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/client"
)

// StartContainerd starts (or restarts) the containerd daemon with its root,
// state and socket in e.Dir, with the configuration its version reads:
// version 3 for containerd 2.x, version 2 for 1.7 (CRI options directly
// under the CRI plugin, no separate image and runtime plugins; NRI off by
// default there).
func (e *Env) StartContainerd(ctx context.Context) error {
	e.CtrAddress = filepath.Join(e.Dir, "containerd.sock")
	conf := filepath.Join(e.Dir, "containerd.toml")
	if e.ctrVersion == "" {
		v, err := containerdVersion(e.ctrBin)
		if err != nil {
			return err
		}
		e.ctrVersion = v
	}
	if err := os.WriteFile(conf, []byte(containerdConfig(e.ctrVersion, e.Dir, e.CtrAddress, e.ctrNRI, e.CtrNRISocket, e.NRIPluginDir, e.NRIConfDir)), 0o644); err != nil {
		return err
	}
	// its shims (containerd-shim-runc-v2, installed next to it) on PATH
	path := "PATH=" + filepath.Dir(e.ctrBin) + string(os.PathListSeparator) + os.Getenv("PATH")
	p, err := startEnv([]string{path}, "containerd", filepath.Join(e.Dir, "containerd.log"), e.ctrBin, "--config", conf)
	if err != nil {
		return err
	}
	e.Containerd = p
	if e.Ctr != nil {
		e.Ctr.Close()
		e.Ctr = nil
	}
	err = waitFor(ctx, 20*time.Second, func() error {
		if !p.Running() {
			return errors.New("containerd exited")
		}
		c, err := client.New(e.CtrAddress, client.WithTimeout(time.Second))
		if err != nil {
			return err
		}
		if _, err := c.Version(ctx); err != nil {
			c.Close()
			return err
		}
		e.Ctr = c
		return nil
	})
	if err != nil {
		return fmt.Errorf("containerd (%s) did not come up (it must run as root): %w\n%s", e.ctrBin, err, p.Tail(30))
	}
	return nil
}

// RestartContainerd stops the containerd daemon and starts it again on the
// same root and state: containers survive, connections and event
// subscriptions break.
func (e *Env) RestartContainerd(ctx context.Context, whileDown func() error) error {
	e.Containerd.Stop()
	if whileDown != nil {
		if err := whileDown(); err != nil {
			return err
		}
	}
	return e.StartContainerd(ctx)
}

// containerdVersion is the version containerd reports (`containerd
// --version`: "containerd github.com/containerd/containerd/v2 v2.4.2 ...").
func containerdVersion(bin string) (string, error) {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", bin, err)
	}
	// "containerd MODULE VERSION [REVISION]"; VERSION is "v1.7.35", or
	// "2.4.2+unknown" from go install
	if f := strings.Fields(string(out)); len(f) >= 3 && strings.Count(f[2], ".") >= 2 {
		return "v" + strings.TrimPrefix(f[2], "v"), nil
	}
	return "", fmt.Errorf("%s --version: no version in %q", bin, out)
}

// ContainerdVersion is the version of the running containerd.
func (e *Env) ContainerdVersion() string { return e.ctrVersion }

// containerdConfig is the daemon's configuration, in the form version reads.
func containerdConfig(version, dir, address string, withNRI bool, nriSocket, pluginDir, confDir string) string {
	v1 := strings.HasPrefix(version, "v1.")
	disabled := "'io.containerd.grpc.v1.cri', 'io.containerd.cri.v1.runtime', 'io.containerd.cri.v1.images', "
	if v1 {
		disabled = "'io.containerd.grpc.v1.cri', "
	}
	nri := ""
	if withNRI {
		// containerd starts its NRI with CRI: CRI on (no CNI, no pods
		// unless a test makes them), NRI with its socket, plugin and
		// configuration directories in dir
		disabled = ""
		nri = fmt.Sprintf(`[plugins.'io.containerd.nri.v1.nri']
  disable = false
  socket_path = '%[1]s'
  plugin_path = '%[2]s'
  plugin_config_path = '%[3]s'
  plugin_registration_timeout = '5s'
  plugin_request_timeout = '2s'
[plugins.'io.containerd.grpc.v1.cri']
  disable_tcp_service = true
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
`, nriSocket, pluginDir, confDir)
		// CNI from dir/cni (Options.CNI puts a network there): bin_dir is
		// 1.7's and 2.0's key, bin_dirs 2.1's and later (each ignores
		// the other's in a config of its own version)
		if v1 {
			nri += fmt.Sprintf(`  sandbox_image = '%[1]s'
  restrict_oom_score_adj = true
[plugins.'io.containerd.grpc.v1.cri'.cni]
  bin_dir = '%[2]s/cni/bin'
  conf_dir = '%[2]s/cni/conf'
`, PauseImage, dir)
		} else {
			nri += fmt.Sprintf(`[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = '%[1]s'
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
[plugins.'io.containerd.cri.v1.runtime'.cni]
  bin_dir = '%[2]s/cni/bin'
  bin_dirs = ['%[2]s/cni/bin']
  conf_dir = '%[2]s/cni/conf'
`, PauseImage, dir)
		}
	}
	configVersion := 3
	if v1 {
		configVersion = 2
	}
	return fmt.Sprintf(`version = %[5]d
root = '%[1]s/root'
state = '%[1]s/state'
disabled_plugins = [%[3]s'io.containerd.internal.v1.tracing']
[grpc]
  address = '%[2]s'
[ttrpc]
  address = '%[2]s.ttrpc'
[debug]
  address = ''
%[4]s`, dir, address, disabled, nri, configVersion)
}
