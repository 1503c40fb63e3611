// The containerd daemon: its config, start and restart.

package harness

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/containerd/containerd/v2/client"
)

// StartContainerd starts (or restarts) the containerd daemon with its root,
// state and socket in e.Dir.
func (e *Env) StartContainerd(ctx context.Context) error {
	e.CtrAddress = filepath.Join(e.Dir, "containerd.sock")
	conf := filepath.Join(e.Dir, "containerd.toml")
	disabled := "'io.containerd.grpc.v1.cri', 'io.containerd.cri.v1.runtime', 'io.containerd.cri.v1.images', "
	nri := ""
	if e.ctrNRI {
		// containerd starts its NRI with CRI: CRI on (no CNI, no pods
		// unless a test makes them), NRI with its socket, plugin and
		// configuration directories in e.Dir
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
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = '%[4]s'
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true
`, e.CtrNRISocket, e.NRIPluginDir, e.NRIConfDir, PauseImage)
	}
	body := fmt.Sprintf(`version = 3
root = '%[1]s/root'
state = '%[1]s/state'
disabled_plugins = [%[3]s'io.containerd.internal.v1.tracing']
[grpc]
  address = '%[2]s'
[ttrpc]
  address = '%[2]s.ttrpc'
[debug]
  address = ''
%[4]s`, e.Dir, e.CtrAddress, disabled, nri)
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
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
