// Package harness starts the real components of an end-to-end run on Linux:
// a containerd daemon in a temp dir, the HNS simulator process, the NRI
// runtime side (nri/pkg/adaptation, what containerd embeds) and the plugin
// binary as its own process. Tests and the demo drive pods through it the way
// containerd's CRI does on Windows and read HCN state from outside the plugin.
package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	apievents "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/protobuf/types/known/anypb"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/containerd"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/status"
)

// ContainerdVersion is the containerd the harness expects.
const ContainerdVersion = "v2.4.2"

// FindContainerd locates the containerd binary: $CONTAINERD_BIN, then
// $GOBIN or $GOPATH/bin (where `go install` puts it), then $PATH.
func FindContainerd() (string, error) {
	if p := os.Getenv("CONTAINERD_BIN"); p != "" {
		return p, nil
	}
	var cands []string
	if gobin := goEnv("GOBIN"); gobin != "" {
		cands = append(cands, filepath.Join(gobin, "containerd"))
	}
	if gopath := goEnv("GOPATH"); gopath != "" {
		cands = append(cands, filepath.Join(strings.Split(gopath, string(os.PathListSeparator))[0], "bin", "containerd"))
	}
	for _, c := range cands {
		if _, err := os.Stat(c); err == nil {
			return c, nil
		}
	}
	if p, err := exec.LookPath("containerd"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("containerd not found (looked at $CONTAINERD_BIN, %s, $PATH): run `make containerd`, "+
		"which does `go install github.com/containerd/containerd/v2/cmd/containerd@%s`", strings.Join(cands, ", "), ContainerdVersion)
}

func goEnv(key string) string {
	out, err := exec.Command("go", "env", key).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// ModuleRoot is the directory of this Go module.
func ModuleRoot() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		return "", fmt.Errorf("go list -m: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// BuildPlugin builds the plugin binary into dir and returns its path.
func BuildPlugin(dir string) (string, error) {
	return BuildBinary(dir, "nri-hcn-portmap", "./cmd/nri-hcn-portmap")
}

// BuildBinary builds the module's package pkg into dir/name.
func BuildBinary(dir, name, pkg string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, name)
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}

// Process is a child process with its log file.
type Process struct {
	Name string
	Log  string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func start(name, logPath, bin string, args ...string) (*Process, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Process{Name: name, Log: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// PID is the process ID.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Running reports whether the process has not exited.
func (p *Process) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL (a crash) and waits for the exit.
func (p *Process) Kill() { p.signal(syscall.SIGKILL) }

// Stop sends SIGTERM and waits up to 10 s, then kills.
func (p *Process) Stop() {
	p.signal(syscall.SIGTERM)
}

func (p *Process) signal(sig syscall.Signal) {
	if !p.Running() {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Tail returns the last n lines of the process log.
func (p *Process) Tail(n int) string {
	b, _ := os.ReadFile(p.Log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Env is one end-to-end environment.
type Env struct {
	Dir        string
	PluginBin  string
	Containerd *Process
	CtrAddress string
	Ctr        *client.Client
	Sim        *Process
	SimAddress string
	SimClient  *hcnsim.Client
	NRISocket  string // where the plugin connects (a proxy in front of the runtime side)
	AdminAddr  string // the plugin's /healthz, /metrics and /reload
	NRI        *adaptation.Adaptation
	nriProxy   *connProxy
	Plugin     *Process
	ConfigPath string

	ctrBin      string
	mu          sync.Mutex
	pods        map[string]*api.PodSandbox // what the runtime reports in Synchronize
	syncs       chan struct{}
	invocations []Invocation
	lastSync    time.Duration
}

// LastSync is how long the plugin took to answer the last Synchronize.
func (e *Env) LastSync() time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lastSync
}

// ResetInvocations forgets the recorded plugin calls.
func (e *Env) ResetInvocations() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.invocations = nil
}

// Invocation is one plugin call as the NRI runtime side recorded it.
type Invocation struct {
	Plugin, Operation string
	Err               error
	Latency           time.Duration
}

// Invocations returns what the runtime side recorded of plugin calls.
func (e *Env) Invocations() []Invocation {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.invocations)
}

// recorder implements adaptation.Metrics.
type recorder struct{ e *Env }

func (r recorder) RecordPluginInvocation(plugin, op string, err error) {
	r.e.mu.Lock()
	defer r.e.mu.Unlock()
	r.e.invocations = append(r.e.invocations, Invocation{Plugin: plugin, Operation: op, Err: err})
}

func (r recorder) RecordPluginLatency(plugin, op string, d time.Duration) {
	r.e.mu.Lock()
	defer r.e.mu.Unlock()
	for i := len(r.e.invocations) - 1; i >= 0; i-- {
		if inv := &r.e.invocations[i]; inv.Plugin == plugin && inv.Operation == op && inv.Latency == 0 {
			inv.Latency = d
			break
		}
	}
}

func (recorder) RecordPluginAdjustments(string, string, *adaptation.ContainerAdjustment, int, int) {}
func (recorder) UpdatePluginCount(int)                                                             {}

// Options tune an Env.
type Options struct {
	PluginBin string // prebuilt plugin binary; built into Dir when empty
	// Config is the plugin's TOML configuration; a default that creates a
	// NAT network is used when empty. The simulator address and sockets
	// are passed as flags.
	Config string
}

// NetworkConfig creates the NAT network the endpoints go on and logs at
// debug level.
const NetworkConfig = `
[hcn]
network = "nat"
create_network = true
network_type = "NAT"
subnet = "172.30.0.0/16"
gateway = "172.30.0.1"

[log]
level = "debug"
`

// DefaultConfig takes mappings from annotations and Kubernetes hostPort.
const DefaultConfig = `[plugin]
mapping_sources = ["annotations", "cri"]
` + NetworkConfig

// Start brings up containerd, the simulator and the NRI runtime side. The
// plugin is started with StartPlugin.
func Start(ctx context.Context, o Options) (_ *Env, retErr error) {
	// Keep socket paths short (sun_path is 108 bytes).
	dir, err := os.MkdirTemp("", "hcnpm-e2e-")
	if err != nil {
		return nil, err
	}
	e := &Env{Dir: dir, PluginBin: o.PluginBin, pods: map[string]*api.PodSandbox{}, syncs: make(chan struct{}, 64)}
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
	if err := e.StartContainerd(ctx); err != nil {
		return nil, err
	}
	e.SimAddress = "unix://" + filepath.Join(dir, "hns.sock")
	if e.Sim, err = start("simulator", filepath.Join(dir, "simulator.log"), e.PluginBin, "simulator", "--listen", e.SimAddress); err != nil {
		return nil, err
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

// StartContainerd starts (or restarts) the containerd daemon with its root,
// state and socket in e.Dir.
func (e *Env) StartContainerd(ctx context.Context) error {
	e.CtrAddress = filepath.Join(e.Dir, "containerd.sock")
	conf := filepath.Join(e.Dir, "containerd.toml")
	body := fmt.Sprintf(`version = 3
root = '%[1]s/root'
state = '%[1]s/state'
disabled_plugins = ['io.containerd.grpc.v1.cri', 'io.containerd.cri.v1.runtime', 'io.containerd.cri.v1.images', 'io.containerd.internal.v1.tracing']
[grpc]
  address = '%[2]s'
[ttrpc]
  address = '%[2]s.ttrpc'
[debug]
  address = ''
`, e.Dir, e.CtrAddress)
	if err := os.WriteFile(conf, []byte(body), 0o644); err != nil {
		return err
	}
	p, err := start("containerd", filepath.Join(e.Dir, "containerd.log"), e.ctrBin, "--config", conf)
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

// StartNRI starts the NRI runtime side on a socket in e.Dir.
func (e *Env) StartNRI() error {
	e.NRISocket = filepath.Join(e.Dir, "nri.sock")
	backend := filepath.Join(e.Dir, "nri-runtime.sock")
	if e.nriProxy == nil {
		p, err := newConnProxy(e.NRISocket, backend)
		if err != nil {
			return err
		}
		e.nriProxy = p
	}
	empty := filepath.Join(e.Dir, "nri-plugins")
	if err := os.MkdirAll(empty, 0o755); err != nil {
		return err
	}
	syncFn := func(ctx context.Context, cb adaptation.SyncCB) error {
		pods := e.runtimePods()
		start := time.Now()
		_, err := cb(ctx, pods, nil)
		e.mu.Lock()
		e.lastSync = time.Since(start)
		e.mu.Unlock()
		select {
		case e.syncs <- struct{}{}:
		default:
		}
		return err
	}
	updateFn := func(context.Context, []*adaptation.ContainerUpdate) ([]*adaptation.ContainerUpdate, error) {
		return nil, nil
	}
	r, err := adaptation.New("containerd", ContainerdVersion, syncFn, updateFn,
		adaptation.WithSocketPath(backend), adaptation.WithPluginPath(empty), adaptation.WithPluginConfigPath(empty),
		adaptation.WithMetrics(recorder{e}))
	if err != nil {
		return fmt.Errorf("NRI adaptation: %w", err)
	}
	if err := r.Start(); err != nil {
		return fmt.Errorf("NRI adaptation start: %w", err)
	}
	e.NRI = r
	return nil
}

func (e *Env) runtimePods() []*api.PodSandbox {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*api.PodSandbox, 0, len(e.pods))
	for _, p := range e.pods {
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *api.PodSandbox) int { return strings.Compare(a.Id, b.Id) })
	return out
}

// StopNRI stops the NRI runtime side and closes the plugin connections, as
// a containerd restart does.
func (e *Env) StopNRI() {
	if e.NRI != nil {
		e.NRI.Stop()
		e.NRI = nil
	}
	if e.nriProxy != nil {
		e.nriProxy.drop()
	}
	for len(e.syncs) > 0 {
		<-e.syncs
	}
}

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
		return fmt.Errorf("plugin exited before registering: %v\n%s", p.err, p.Tail(30))
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

// Pod describes a sandbox to create.
type Pod struct {
	ID, Name, Namespace, UID string
	Annotations              map[string]string
	// HostPorts are the CRI port mappings (Kubernetes hostPort) stored in
	// the sandbox metadata.
	HostPorts []*runtimeapi.PortMapping
	// NoWindowsNamespace makes a sandbox without Windows.Network (a Linux
	// or HostProcess sandbox).
	NoWindowsNamespace bool
}

// criMetadataTypeURL is the type URL containerd's CRI stores the sandbox
// metadata extension under.
const criMetadataTypeURL = "github.com/containerd/cri/pkg/store/sandbox/Metadata"

// CRIMetadata encodes the io.cri-containerd.sandbox.metadata extension the
// way containerd does: encoding/json over its versioned Metadata struct,
// whose Config is the CRI PodSandboxConfig.
func (p Pod) CRIMetadata(netnsPath string) ([]byte, error) {
	type metadata struct {
		ID             string
		Name           string
		Config         *runtimeapi.PodSandboxConfig
		NetNSPath      string
		IP             string
		AdditionalIPs  []string
		RuntimeHandler string
		CNIResult      any
		ProcessLabel   string
	}
	return json.Marshal(struct {
		Version  string
		Metadata metadata
	}{"v1", metadata{
		ID:        p.ID,
		Name:      strings.Join([]string{p.Name, p.Namespace, p.UID, "0"}, "_"),
		NetNSPath: netnsPath,
		Config: &runtimeapi.PodSandboxConfig{
			Metadata:     &runtimeapi.PodSandboxMetadata{Name: p.Name, Uid: p.UID, Namespace: p.Namespace},
			Annotations:  p.Annotations,
			PortMappings: p.HostPorts,
		},
	}})
}

// NRIPod is the pod as the NRI runtime side reports it.
func (p Pod) NRIPod() *api.PodSandbox {
	return &api.PodSandbox{Id: p.ID, Name: p.Name, Namespace: p.Namespace, Uid: p.UID, Annotations: p.Annotations}
}

// RunRequest is the NRI RunPodSandbox request for p.
func RunRequest(p Pod) *api.RunPodSandboxRequest { return &api.RunPodSandboxRequest{Pod: p.NRIPod()} }

// K8s is the containerd namespace CRI uses.
const K8s = "k8s.io"

// CreateSandbox does what containerd's CRI does on Windows before any plugin
// hears of the pod: create the pod's HCN namespace, then the sandbox
// container whose spec names it. It returns the namespace GUID ("" for a
// sandbox without one).
func (e *Env) CreateSandbox(ctx context.Context, p Pod) (string, error) {
	spec := &oci.Spec{Version: specs.Version}
	var guid string
	if !p.NoWindowsNamespace {
		var err error
		if guid, err = e.SimClient.CreateNamespace(ctx, ""); err != nil {
			return "", err
		}
		spec.Windows = &specs.Windows{Network: &specs.WindowsNetwork{NetworkNamespace: guid}}
	}
	opts := []client.NewContainerOpts{
		client.WithContainerLabels(map[string]string{containerd.LabelKind: containerd.KindSandbox}),
		client.WithSpec(spec),
		client.WithRuntime("io.containerd.runhcs.v1", nil),
	}
	meta, err := p.CRIMetadata(guid)
	if err != nil {
		return "", err
	}
	opts = append(opts, client.WithContainerExtension(request.ExtensionMetadata, &anypb.Any{TypeUrl: criMetadataTypeURL, Value: meta}))
	if _, err := e.Ctr.NewContainer(namespaces.WithNamespace(ctx, K8s), p.ID, opts...); err != nil {
		return "", fmt.Errorf("creating sandbox container %s: %w", p.ID, err)
	}
	return guid, nil
}

// RunPod creates the sandbox and sends RunPodSandbox, as containerd does.
func (e *Env) RunPod(ctx context.Context, p Pod) (string, error) {
	guid, err := e.CreateSandbox(ctx, p)
	if err != nil {
		return "", err
	}
	e.mu.Lock()
	e.pods[p.ID] = p.NRIPod()
	e.mu.Unlock()
	if err := e.NRI.RunPodSandbox(ctx, &api.RunPodSandboxRequest{Pod: p.NRIPod()}); err != nil {
		// containerd tears a failed sandbox down at once
		_ = e.StopPod(ctx, p, guid)
		_ = e.RemovePod(ctx, p)
		return guid, err
	}
	return guid, nil
}

// StopPod sends StopPodSandbox, then deletes the HCN namespace as
// containerd's CNI teardown does.
func (e *Env) StopPod(ctx context.Context, p Pod, guid string) error {
	err := e.NRI.StopPodSandbox(ctx, &api.StopPodSandboxRequest{Pod: p.NRIPod()})
	if guid != "" {
		if nerr := e.SimClient.DeleteNamespace(ctx, guid); nerr != nil && err == nil {
			err = nerr
		}
	}
	return err
}

// RemovePod deletes the sandbox container, then sends RemovePodSandbox.
func (e *Env) RemovePod(ctx context.Context, p Pod) error {
	e.mu.Lock()
	delete(e.pods, p.ID)
	e.mu.Unlock()
	if err := e.Ctr.ContainerService().Delete(namespaces.WithNamespace(ctx, K8s), p.ID); err != nil {
		return err
	}
	return e.NRI.RemovePodSandbox(ctx, &api.RemovePodSandboxRequest{Pod: p.NRIPod()})
}

// ForgetPod drops a pod from the runtime's view without telling any plugin
// (what happens while the plugin is down).
func (e *Env) ForgetPod(ctx context.Context, p Pod, guid string) error {
	e.mu.Lock()
	delete(e.pods, p.ID)
	e.mu.Unlock()
	if guid != "" {
		if err := e.SimClient.DeleteNamespace(ctx, guid); err != nil {
			return err
		}
	}
	return e.Ctr.ContainerService().Delete(namespaces.WithNamespace(ctx, K8s), p.ID)
}

// AddPodSilently creates a sandbox and lists it as running without telling
// any plugin (a pod started while the plugin was down).
func (e *Env) AddPodSilently(ctx context.Context, p Pod) (string, error) {
	guid, err := e.CreateSandbox(ctx, p)
	if err != nil {
		return "", err
	}
	e.mu.Lock()
	e.pods[p.ID] = p.NRIPod()
	e.mu.Unlock()
	return guid, nil
}

// PluginArgs are the arguments of a plugin command against this
// environment.
func (e *Env) PluginArgs(cmd string) []string {
	return []string{cmd, "--config", e.ConfigPath, "--nri-socket", e.NRISocket, "--containerd-address", e.CtrAddress,
		"--hcn-backend", "simulated", "--hcn-simulator", e.SimAddress, "--admin-listen", e.AdminAddr}
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
	if os.Getenv("KEEP_E2E_DIR") == "" {
		os.RemoveAll(e.Dir)
	}
}

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

// Eventually polls f until it returns nil or d passes.
func Eventually(ctx context.Context, d time.Duration, f func() error) error {
	return waitFor(ctx, d, f)
}

// Synced delivers a value each time a plugin finished registering.
func (e *Env) Synced() <-chan struct{} { return e.syncs }

// Publish sends an event into containerd's k8s.io namespace, as containerd
// itself does when a task starts or stops.
func (e *Env) Publish(ctx context.Context, topic string, ev any) error {
	if err := e.Ctr.EventService().Publish(namespaces.WithNamespace(ctx, K8s), topic, ev); err != nil {
		return fmt.Errorf("publishing %s: %w", topic, err)
	}
	return nil
}

// PublishStart publishes /tasks/start of a sandbox.
func (e *Env) PublishStart(ctx context.Context, id string) error {
	return e.Publish(ctx, containerd.TopicTaskStart, &apievents.TaskStart{ContainerID: id, Pid: 4242})
}

// PublishExit publishes /tasks/exit of a sandbox's init process.
func (e *Env) PublishExit(ctx context.Context, id string) error {
	return e.Publish(ctx, containerd.TopicTaskExit, &apievents.TaskExit{ContainerID: id, ID: id, Pid: 4242, ExitStatus: 0})
}

// PublishTaskDelete publishes /tasks/delete of a sandbox.
func (e *Env) PublishTaskDelete(ctx context.Context, id string) error {
	return e.Publish(ctx, containerd.TopicTaskDelete, &apievents.TaskDelete{ContainerID: id, ID: id, Pid: 4242})
}

// PublishContainerDelete publishes /containers/delete.
func (e *Env) PublishContainerDelete(ctx context.Context, id string) error {
	return e.Publish(ctx, containerd.TopicContainerDelete, &apievents.ContainerDelete{ID: id})
}

// DeleteSandbox deletes the sandbox container from containerd.
func (e *Env) DeleteSandbox(ctx context.Context, id string) error {
	return e.Ctr.ContainerService().Delete(namespaces.WithNamespace(ctx, K8s), id)
}

// StartPluginEvents starts the plugin with the containerd event source and
// waits until it reports its subscription live.
func (e *Env) StartPluginEvents(ctx context.Context, extraArgs ...string) error {
	logPath := filepath.Join(e.Dir, "plugin.log")
	before := 0
	if b, err := os.ReadFile(logPath); err == nil {
		before = bytes.Count(b, []byte(subscribedLine))
	}
	args := append(e.PluginArgs("run"), append([]string{"--source", "containerd"}, extraArgs...)...)
	p, err := start("plugin", logPath, e.PluginBin, args...)
	if err != nil {
		return err
	}
	e.Plugin = p
	return e.WaitSubscribed(ctx, before+1, 20*time.Second)
}

const subscribedLine = "subscribed to containerd events"

// WaitSubscribed waits until the plugin log reports its n-th live
// subscription to containerd events and the resync that follows it.
func (e *Env) WaitSubscribed(ctx context.Context, n int, d time.Duration) error {
	err := waitFor(ctx, d, func() error {
		b, _ := os.ReadFile(filepath.Join(e.Dir, "plugin.log"))
		// the resync that follows each subscription must be over too, so
		// that what a test does next is seen through events only
		resyncs := 0
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "resync") && strings.Contains(line, "reason=subscribed") && strings.Contains(line, "done") {
				resyncs++
			}
		}
		if got := bytes.Count(b, []byte(subscribedLine)); got < n || resyncs < n {
			if !e.Plugin.Running() {
				return fmt.Errorf("plugin exited: %v", e.Plugin.err)
			}
			return fmt.Errorf("plugin subscribed %d times and resynced %d times, want %d", got, resyncs, n)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w\n%s", err, e.Plugin.Tail(30))
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

func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
