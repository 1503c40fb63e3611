// Package harness starts the real components of an end-to-end run on Linux:
// a containerd daemon in a temp dir, the HNS simulator process, the NRI
// runtime side (nri/pkg/adaptation, what containerd embeds) and the plugin
// binary as its own process. Tests and the demo drive pods through it the way
// containerd's CRI does on Windows and read HCN state from outside the plugin.
package harness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
)

// Env is one end-to-end environment.
type Env struct {
	Dir        string
	PluginBin  string
	Containerd *Process
	CtrAddress string
	// CtrTCP is a loopback TCP relay to containerd's socket
	// (tcp://127.0.0.1:port) when Options.ContainerdTCP asked for one.
	CtrTCP   string
	ctrRelay *connProxy
	// With Options.ContainerdNRI: containerd's own NRI socket, and the
	// directories it launches plugins from and reads their conf from.
	CtrNRISocket, NRIPluginDir, NRIConfDir string
	ctrNRI                                 bool
	kube                                   *Kube
	Ctr                                    *client.Client
	Sim                                    *Process
	SimAddress                             string
	SimClient                              *hcnsim.Client
	NRISocket                              string // where the plugin connects (a proxy in front of the runtime side)
	AdminAddr                              string // the plugin's /healthz, /metrics and /reload
	NRI                                    *adaptation.Adaptation
	nriProxy                               *connProxy
	Plugin                                 *Process
	ConfigPath                             string

	ctrBin      string
	ctrVersion  string   // what it reports, e.g. v2.4.2
	pluginPre   []string // arguments before the command (the .exe under wine)
	windows     bool
	noAdminKey  bool // a plugin from before --admin-key-file
	mu          sync.Mutex
	pods        map[string]*api.PodSandbox // what the runtime reports in Synchronize
	syncs       chan struct{}
	invocations []Invocation
	lastSync    time.Duration
}

// Options tune an Env.
type Options struct {
	PluginBin string // prebuilt plugin binary; built into Dir when empty
	// Config is the plugin's TOML configuration; a default that creates a
	// NAT network is used when empty. The simulator address and sockets
	// are passed as flags.
	Config string
	// PluginCmd, when set, runs the plugin as this command line plus its
	// arguments (e.g. wine64 and the .exe), instead of PluginBin.
	PluginCmd []string
	// Windows: the plugin is the Windows build; it is given containerd's
	// TCP address and no simulator flags.
	Windows bool
	// ContainerdNRI runs containerd with its own NRI (and so CRI) on.
	ContainerdNRI bool
	// CNI gives containerd's CRI a pod network (with ContainerdNRI): the
	// fake CNI plugin (test/fakecni), which reports an address and
	// FakeCNIDNS, so that CRI records a CNI result in the sandbox's
	// metadata as it does on a node.
	CNI bool
	// ContainerdTCP also relays a loopback TCP port to containerd.
	ContainerdTCP bool
	// NoAdminKey starts a plugin from before the admin key (a build of an
	// older revision, as the benchmark's before side) without
	// --admin-key-file, which it would refuse.
	NoAdminKey bool
	// Simulator is the address of an HNS model already serving (the wine
	// emulator's); none is started then.
	Simulator string
}

// HCNConfig creates the NAT network the endpoints go on and logs at debug
// level.
const HCNConfig = `
[hcn]
network = "nat"
create_network = true
network_type = "NAT"
subnet = "172.30.0.0/16"
gateway = "172.30.0.1"

[log]
level = "debug"
`

// NoAPIServer turns off the two checks that read the API server, the
// annotation's Pod Security and the host ports' NetworkPolicy: the tests
// of other behaviours run no API server (the checks' own tests do:
// test/e2e/podsecurity_test.go, netpol_test.go).
const NoAPIServer = `
[admission]
pod_security = "off"
network_policy = "off"
`

// NetworkConfig is HCNConfig for tests that run no API server.
const NetworkConfig = HCNConfig + NoAPIServer

// DefaultConfig takes mappings from annotations and Kubernetes hostPort.
const DefaultConfig = `[plugin]
mapping_sources = ["annotations", "cri"]
` + NetworkConfig

// Start brings up containerd, the simulator and the NRI runtime side. The
// plugin is started with StartPlugin.
func Start(ctx context.Context, o Options) (_ *Env, retErr error) {
	// Keep socket paths short (sun_path is 108 bytes). The .exe under
	// wine reads the security of every folder on its paths (the config,
	// the admin key) from what wine makes of their Unix modes, which
	// shows /tmp (1777: wine does not show the sticky bit) as a folder
	// everyone may delete entries in, as a Windows folder of that DACL
	// would be: its files go under /run (0755, root's) instead.
	base := ""
	if o.Windows {
		base = "/run"
	}
	dir, err := os.MkdirTemp(base, "hcnpm-e2e-")
	if err != nil {
		return nil, err
	}
	e := &Env{Dir: dir, PluginBin: o.PluginBin, pods: map[string]*api.PodSandbox{}, syncs: make(chan struct{}, 64),
		windows: o.Windows, noAdminKey: o.NoAdminKey}
	if len(o.PluginCmd) > 0 {
		e.PluginBin, e.pluginPre = o.PluginCmd[0], o.PluginCmd[1:]
	}
	defer func() {
		if retErr != nil {
			e.Close()
		}
	}()
	if e.PluginBin == "" {
		if e.PluginBin, err = BuildPlugin(dir); err != nil {
			return nil, err
		}
	}
	if e.ctrBin, err = FindContainerd(); err != nil {
		return nil, err
	}
	if o.CNI {
		if err := installFakeCNI(dir); err != nil {
			return nil, err
		}
	}
	if o.ContainerdNRI {
		e.ctrNRI = true
		e.CtrNRISocket = filepath.Join(dir, "ctr-nri.sock")
		e.NRIPluginDir, e.NRIConfDir = filepath.Join(dir, "nri-plugins"), filepath.Join(dir, "nri-conf")
		for _, d := range []string{e.NRIPluginDir, e.NRIConfDir} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return nil, err
			}
		}
	}
	if err := e.StartContainerd(ctx); err != nil {
		return nil, err
	}
	if o.ContainerdTCP {
		if e.ctrRelay, err = newTCPRelay(e.CtrAddress); err != nil {
			return nil, err
		}
		e.CtrTCP = "tcp://" + e.ctrRelay.l.Addr().String()
	}
	e.SimAddress = o.Simulator
	if e.SimAddress == "" {
		e.SimAddress = "unix://" + filepath.Join(dir, "hns.sock")
		simBin := e.PluginBin
		if len(o.PluginCmd) > 0 { // the simulator is a Linux command
			if simBin, err = BuildPlugin(dir); err != nil {
				return nil, err
			}
		}
		if e.Sim, err = start("simulator", filepath.Join(dir, "simulator.log"), simBin, "simulator", "--listen", e.SimAddress); err != nil {
			return nil, err
		}
	}
	if e.SimClient, err = hcnsim.NewClient(e.SimAddress); err != nil {
		return nil, err
	}
	if err := waitFor(ctx, 10*time.Second, func() error { _, _, err := e.SimClient.State(ctx); return err }); err != nil {
		return nil, fmt.Errorf("simulator did not come up: %w\n%s", err, e.Sim.Tail(20))
	}
	cfg := o.Config
	if cfg == "" {
		cfg = DefaultConfig
	}
	if e.AdminAddr, err = freeLoopbackAddr(); err != nil {
		return nil, err
	}
	e.ConfigPath = filepath.Join(dir, "config.toml")
	if err := os.WriteFile(e.ConfigPath, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	if err := e.StartNRI(); err != nil {
		return nil, err
	}
	return e, nil
}

// Close stops everything and removes the temp dir (kept when KEEP_E2E_DIR is set).
func (e *Env) Close() {
	if e.Plugin != nil {
		e.Plugin.Stop()
	}
	if e.NRI != nil {
		e.NRI.Stop()
	}
	if e.nriProxy != nil {
		e.nriProxy.close()
	}
	if e.ctrRelay != nil {
		e.ctrRelay.close()
	}
	if e.kube != nil {
		e.kube.Stop()
	}
	if e.SimClient != nil {
		e.SimClient.Close()
	}
	if e.Sim != nil {
		e.Sim.Stop()
	}
	if e.Ctr != nil {
		e.Ctr.Close()
	}
	if e.Containerd != nil {
		e.Containerd.Stop()
	}
	if e.ctrNRI {
		// what containerd started and does not stop with itself: plugins
		// it launched (they end by themselves unless a test broke that),
		// CRI pods' shims
		killUnder(e.Dir)
	}
	if os.Getenv("KEEP_E2E_DIR") == "" {
		os.RemoveAll(e.Dir)
	}
}

// K8s is the containerd namespace CRI uses.
const K8s = "k8s.io"

func waitFor(ctx context.Context, d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Consistently polls f for d and fails on the first error: "nothing
// happens" must hold over a window, not on one look.
func Consistently(ctx context.Context, d time.Duration, f func() error) error {
	end := time.Now().Add(d)
	for {
		if err := f(); err != nil {
			return err
		}
		if time.Now().After(end) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Eventually polls f until it returns nil or d passes.
func Eventually(ctx context.Context, d time.Duration, f func() error) error {
	return waitFor(ctx, d, f)
}

// killUnder kills the processes whose executable or command line names a
// path under dir.
func killUnder(dir string) {
	for _, pid := range processes(func(exe, cmdline string) bool {
		return strings.HasPrefix(exe, dir+"/") || strings.Contains(cmdline, dir+"/")
	}) {
		if p, err := os.FindProcess(pid); err == nil {
			_ = p.Kill()
		}
	}
}

// PIDsOf lists the processes running the executable at path.
func PIDsOf(path string) []int {
	return processes(func(exe, _ string) bool { return exe == path })
}

// processes lists the PIDs (not this process's) whose executable and
// command line match.
func processes(match func(exe, cmdline string) bool) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, d := range entries {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		exe, _ := os.Readlink(filepath.Join("/proc", d.Name(), "exe"))
		cmdline, _ := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if match(exe, string(cmdline)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func freeLoopbackAddr() (string, error) {
	// below Linux's ephemeral range (ip_local_port_range, 32768-60999 by
	// default): a port the kernel picks (127.0.0.1:0) is one it may give
	// the next outbound connection of any process (the kube-apiserver
	// took one between this pick and the plugin's bind), while one
	// below it is taken only by a program that asks for it. And clear of
	// the host ports the tests map (e2e 18000-19999, bench 20000-39999):
	// the plugin refuses to map its own ports
	var err error
	for range 50 {
		addr := fmt.Sprintf("127.0.0.1:%d", 11000+rand.IntN(7000))
		var l net.Listener
		if l, err = net.Listen("tcp", addr); err == nil {
			l.Close()
			return addr, nil
		}
	}
	return "", fmt.Errorf("no free loopback port in 11000-17999: %w", err)
}
