// Package bench measures what the plugin costs a node, each figure side by
// side with its baseline in the same run: the event path and RunPodSandbox
// through the real NRI runtime side against the I/O floor and a do-nothing
// plugin, for each DNS shape of a pod (kubelet's config, the CNI's in the
// record, neither), a start with hostPort on a node of 250 and 1,000 pods,
// Synchronize at 100 to 5,000 pods, pod churn with a slow HNS, and the
// plugin's memory. `make bench`
// runs the whole suite (cmd report); the Benchmark functions expose the
// same measurements to `go test -bench`.
package bench

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

// Config is the plugin configuration for benchmarks: no periodic resync,
// so only the measured work runs.
const Config = `[plugin]
resync_interval = "0s"
` + harness.NetworkConfig

// BuildNop builds the baseline plugin (do-nothing, or the I/O floor) into dir.
func BuildNop(dir string) (string, error) {
	return harness.BuildBinary(dir, "nopplugin", "test/bench", "./nopplugin")
}

// StartBaseline builds the baseline plugin into dir and registers it with
// env's runtime: the do-nothing plugin, or with floor the plugin that makes
// only the containerd and HNS calls a pod start needs.
func StartBaseline(ctx context.Context, env *harness.Env, dir string, floor bool) error {
	bin, err := BuildNop(dir)
	if err != nil {
		return err
	}
	args := []string{"--nri-socket", env.NRISocket}
	if floor {
		args = append(args, "--floor", "--containerd", env.CtrAddress, "--hns", env.SimAddress)
	}
	return env.StartNRIPlugin(ctx, "nop", bin, args...)
}

// FillForTheFloor makes env a node of n running pods with their endpoints
// (built by the plugin's Synchronize, host ports from 25000), then replaces
// the plugin by the I/O floor: the floor measured on a node as full as the
// plugin's.
func FillForTheFloor(ctx context.Context, env *harness.Env, dir string, n int) error {
	if _, err := Synchronize(ctx, env, n, 25000); err != nil {
		return err
	}
	env.Plugin.Stop() // its endpoints stay on the node
	return StartBaseline(ctx, env, dir, true)
}

// DNS is where a benchmark pod's DNS comes from: the three shapes a start
// takes on a node, each with its own necessary work.
type DNS int

const (
	// KubeletDNS: the pod's CRI config holds kubelet's ClusterFirst DNS
	// (the cluster's resolver, the three cluster search domains, ndots:5),
	// as every pod with the default dnsPolicy has. The record is all a
	// start reads.
	KubeletDNS DNS = iota
	// CNIDNS: no DNS config of its own; the CNI's DNS in the record's
	// CNIResult, as containerd keeps it. The record is all a start reads.
	CNIDNS
	// NoDNS: neither; the pod's namespace holds its CNI's endpoint, with
	// the DNS the pod's interface got, which a start asks HNS for (the
	// namespace, then the endpoint).
	NoDNS
)

func (d DNS) String() string {
	switch d {
	case KubeletDNS:
		return "kubelet's ClusterFirst DNS config"
	case CNIDNS:
		return "no DNS config, the CNI's in the record"
	default:
		return "no DNS config, none in the record"
	}
}

// Short names the shape in benchmark names.
func (d DNS) Short() string {
	return [...]string{"kubelet", "cni-record", "none"}[d]
}

// Pod returns a benchmark pod with a mapping on hostPort and kubelet's DNS.
func Pod(prefix string, i int, hostPort int) harness.Pod { return KubeletDNS.Pod(prefix, i, hostPort) }

// Pod returns a benchmark pod of this DNS shape with a mapping on hostPort
// (none when 0).
func (d DNS) Pod(prefix string, i int, hostPort int) harness.Pod {
	return d.PodWith(prefix, i, hostPort, 1)
}

// PodWith is Pod mapping width ports from hostPort: one (hostPort to 80),
// or a UDP range (hostPort.. onto the same ports: an RTP block).
func (d DNS) PodWith(prefix string, i, hostPort, width int) harness.Pod {
	h := sha256.Sum256([]byte(prefix + strconv.Itoa(i)))
	p := harness.Pod{ID: hex.EncodeToString(h[:]), Name: fmt.Sprintf("%s-%d", prefix, i), Namespace: "bench", UID: strconv.Itoa(i)}
	switch {
	case hostPort > 0 && width > 1:
		last := hostPort + width - 1
		p.Annotations = map[string]string{request.AnnotationPortMappings: fmt.Sprintf("%d-%d:%d-%d/udp", hostPort, last, hostPort, last)}
	case hostPort > 0:
		p.Annotations = map[string]string{request.AnnotationPortMappings: fmt.Sprintf("%d:80", hostPort)}
	}
	switch d {
	case KubeletDNS:
		p.DNS = harness.ClusterDNS(p.Namespace)
	case CNIDNS:
		p.CNIDNS = true
	}
	return p
}

// GameServer is pod i as Agones makes a game server's (issue 56): its port
// a Kubernetes hostPort (the CRI record's, no annotation), UDP, from
// hostPort onto the game's 7654, kubelet's DNS.
func GameServer(i, hostPort int) harness.Pod {
	p := KubeletDNS.Pod("game", i, 0)
	p.HostPorts = []*runtimeapi.PortMapping{{Protocol: runtimeapi.Protocol_UDP, ContainerPort: 7654, HostPort: int32(hostPort)}}
	return p
}

// Starts is one turn of a latency measurement: N pods of one DNS shape
// (names from Prefix, host ports from FirstPort), started one at a time
// with every HNS call taking HNS.
type Starts struct {
	DNS       DNS
	Prefix    string
	N         int
	FirstPort int
	HNS       time.Duration
	Width     int // host ports per pod: 0 or 1 one, more a UDP range
}

// turn is the pods of a turn, made before it with HNS answering at once:
// the sandboxes, and for NoDNS their CNI's endpoints.
type turn struct {
	pods  []harness.Pod
	guids []hcn.GUID
	cni   []string
}

// prepare makes the turn's sandboxes (and the CNI's endpoints NoDNS pods
// have) with HNS answering at once, so that only the starts take HNS's
// latency.
func prepare(ctx context.Context, env *harness.Env, s Starts) (*turn, error) {
	if err := env.SimClient.SetLatency(ctx, 0); err != nil {
		return nil, err
	}
	t := &turn{}
	var network string
	for i := range s.N {
		p := s.DNS.PodWith(s.Prefix, i, s.FirstPort+i%20000*max(s.Width, 1), s.Width)
		guid, err := env.CreateSandbox(ctx, p)
		if err != nil {
			return nil, err
		}
		t.pods, t.guids = append(t.pods, p), append(t.guids, guid)
		if s.DNS != NoDNS {
			continue
		}
		if network == "" {
			if network, err = cniNetworkOf(ctx, env); err != nil {
				return nil, err
			}
		}
		servers, search := harness.FakeCNIDNS()
		ep, err := addCNIEndpoint(ctx, env, network, p.ID, guid, hcn.DNS{ServerList: servers, Search: search, Domain: search[0]})
		if err != nil {
			return nil, err
		}
		t.cni = append(t.cni, ep)
	}
	return t, env.SimClient.SetLatency(ctx, s.HNS)
}

// teardown removes the turn's pods with HNS answering at once: each CNI
// endpoint as the CNI's DEL does, then stop (through stop, which tells
// the plugin) and removal.
func (t *turn) teardown(ctx context.Context, env *harness.Env, stop func(p harness.Pod, guid hcn.GUID) error) error {
	if err := env.SimClient.SetLatency(ctx, 0); err != nil {
		return err
	}
	for i, p := range t.pods {
		if i < len(t.cni) {
			if err := env.SimClient.RemoveNamespaceEndpoint(ctx, t.guids[i], t.cni[i]); err != nil {
				return err
			}
			if err := env.SimClient.DeleteEndpoint(ctx, t.cni[i]); err != nil {
				return err
			}
		}
		if err := stop(p, t.guids[i]); err != nil {
			return err
		}
	}
	return nil
}

// HNSCalls counts the HNS calls the simulator served so far.
func HNSCalls(ctx context.Context, env *harness.Env) (int, error) {
	_, ops, err := env.SimClient.State(ctx)
	total := 0
	for _, k := range ops {
		total += k
	}
	return total, err
}

// Percentiles summarises latencies.
type Percentiles struct {
	N             int
	P50, P90, P99 time.Duration
}

// Summarize computes p50, p90 and p99.
func Summarize(d []time.Duration) Percentiles {
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(q float64) time.Duration {
		if len(s) == 0 {
			return 0
		}
		return s[min(len(s)-1, int(q*float64(len(s))))]
	}
	return Percentiles{N: len(s), P50: at(0.50), P90: at(0.90), P99: at(0.99)}
}

// RunPodLatency times s.N RunPodSandbox round trips through the runtime
// side, one at a time (the sandbox containers, and what the CNI made, are
// made beforehand and not timed), and counts the HNS calls they made. The
// pods are then stopped and removed, untimed, with HNS answering at once.
func RunPodLatency(ctx context.Context, env *harness.Env, s Starts) ([]time.Duration, int, error) {
	t, err := prepare(ctx, env, s)
	if err != nil {
		return nil, 0, err
	}
	before, err := HNSCalls(ctx, env)
	if err != nil {
		return nil, 0, err
	}
	out := make([]time.Duration, 0, s.N)
	for _, p := range t.pods {
		start := time.Now()
		err := env.NRI.RunPodSandbox(ctx, harness.RunRequest(p))
		out = append(out, time.Since(start))
		if err != nil {
			return nil, 0, fmt.Errorf("RunPodSandbox %s: %w", p.Name, err)
		}
	}
	after, err := HNSCalls(ctx, env)
	if err != nil {
		return nil, 0, err
	}
	return out, after - before, t.teardown(ctx, env, func(p harness.Pod, guid hcn.GUID) error {
		if err := env.StopPod(ctx, p, guid); err != nil {
			return err
		}
		return env.RemovePod(ctx, p)
	})
}

// SyncResult is one Synchronize measurement.
type SyncResult struct {
	Pods     int
	Answer   time.Duration // until the plugin answered Synchronize
	Complete time.Duration // until every pod had its endpoint
	RSS      Memory        // of the plugin process at completion
}

// addPods creates n running pods (prefix, host ports from firstPort) while
// no plugin runs, 8 at a time, and returns their namespaces.
func addPods(ctx context.Context, env *harness.Env, prefix string, n, firstPort int) ([]hcn.GUID, error) {
	guids := make([]hcn.GUID, n)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	jobs := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range jobs {
				guid, err := env.AddPodSilently(ctx, Pod(prefix, i, firstPort+i))
				if err != nil {
					select {
					case errs <- err:
					default:
					}
				}
				guids[i] = guid
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return nil, err
	default:
	}
	return guids, nil
}

// startPlugin starts the plugin on env's node of n running pods and waits
// until every pod has its endpoint.
func startPlugin(ctx context.Context, env *harness.Env, n int, pluginArgs ...string) error {
	if err := env.StartPlugin(ctx, pluginArgs...); err != nil {
		return err
	}
	return harness.Eventually(ctx, 2*time.Minute, func() error {
		st, _, err := env.SimClient.State(ctx)
		if err != nil {
			return err
		}
		got := 0
		for _, ep := range st.Endpoints {
			if ep.Namespace != "" && strings.HasPrefix(ep.Name, config.EndpointPrefix) {
				got++
			}
		}
		if got < n {
			return fmt.Errorf("%d of %d endpoints", got, n)
		}
		return nil
	})
}

// Synchronize creates n running pods while no plugin runs, starts the
// plugin and measures its Synchronize answer and the background completion.
func Synchronize(ctx context.Context, env *harness.Env, n, firstPort int, pluginArgs ...string) (SyncResult, error) {
	res := SyncResult{Pods: n}
	if _, err := addPods(ctx, env, fmt.Sprintf("sync%d", n), n, firstPort); err != nil {
		return res, err
	}
	start := time.Now()
	err := startPlugin(ctx, env, n, pluginArgs...)
	res.Answer = env.LastSync()
	res.Complete = time.Since(start)
	if err != nil {
		return res, err
	}
	res.RSS, err = ReadMemory(env.Plugin.PID())
	return res, err
}

// FullNodeResult is one measurement of a start on a full node.
type FullNodeResult struct {
	Pods       int           // running pods on the node
	Endpoints  int           // HNS endpoints on the node: theirs and their CNI's
	HNSLatency time.Duration // of every HNS call during the starts
	Start      Percentiles   // RunPodSandbox round trips
	Calls      float64       // HNS calls per start
}

// cniNetwork is the network of the CNI's endpoints in StartOnAFullNode.
var cniNetwork = hcn.NetworkSpec{Name: "cbr0", Type: hcn.NetworkL2Bridge, Subnet: "10.244.0.0/16", Gateway: "10.244.0.1"}

// cniNetworkOf is the ID of env's network for the CNI's endpoints, made
// on first use.
func cniNetworkOf(ctx context.Context, env *harness.Env) (string, error) {
	n, err := env.SimClient.GetNetworkByName(ctx, cniNetwork.Name)
	if errors.Is(err, hcn.ErrNotFound) {
		n, err = env.SimClient.CreateNetwork(ctx, cniNetwork)
	}
	if err != nil {
		return "", err
	}
	return n.ID, nil
}

// addCNIEndpoint makes the pod's CNI endpoint in its namespace, as
// win-bridge's ADD does, with no port mapping and with dns.
func addCNIEndpoint(ctx context.Context, env *harness.Env, network, name string, guid hcn.GUID, dns hcn.DNS) (string, error) {
	ep, err := env.SimClient.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "cbr0_" + name, NetworkID: network, DNS: dns})
	if err != nil {
		return "", err
	}
	return ep.ID, env.SimClient.AddNamespaceEndpoint(ctx, guid, ep.ID)
}

// StartOnAFullNode (issue 26): a node of n running pods, each with the
// plugin's endpoint and its CNI's in its namespace (2n endpoints), the
// plugin mapping hostPort (the default sources); then, with every HNS call
// taking latency, times starts RunPodSandbox of pods whose mapping comes
// from hostPort, each with its CNI endpoint made beforehand (the CNI's ADD,
// untimed). A start asks HNS about the pod's namespace only, so the figure
// must not grow with n.
func StartOnAFullNode(ctx context.Context, env *harness.Env, n, starts int, latency time.Duration) (FullNodeResult, error) {
	res := FullNodeResult{Pods: n, Endpoints: 2 * n, HNSLatency: latency}
	guids, err := addPods(ctx, env, fmt.Sprintf("full%d", n), n, 25000)
	if err != nil {
		return res, err
	}
	network, err := cniNetworkOf(ctx, env)
	if err != nil {
		return res, err
	}
	for i, guid := range guids {
		if _, err := addCNIEndpoint(ctx, env, network, fmt.Sprint("full-", i), guid, hcn.DNS{}); err != nil {
			return res, err
		}
	}
	if err := startPlugin(ctx, env, n); err != nil {
		return res, err
	}
	// the resync the event subscription asks for (events were missed
	// before it) lists the network and opens each endpoint, in the
	// background: its calls are no start's, so the starts are measured
	// once it is done (it overlapped them now and then: 5 to 11.9 calls a
	// start, run to run)
	if err := env.WaitMetric(ctx, `nri_hcn_portmap_reconcile_runs_total{trigger="subscribed"}`, 1, 2*time.Minute); err != nil {
		return res, err
	}
	if err := env.SimClient.SetLatency(ctx, latency); err != nil {
		return res, err
	}
	defer func() { _ = env.SimClient.SetLatency(context.WithoutCancel(ctx), 0) }()
	times := make([]time.Duration, 0, starts)
	calls := 0
	for i := range starts {
		p := Pod(fmt.Sprintf("hostport%d", n), i, 0)
		p.HostPorts = []*runtimeapi.PortMapping{{Protocol: runtimeapi.Protocol_TCP, ContainerPort: 80, HostPort: int32(35000 + i)}}
		guid, cni, err := sandboxBesideCNI(ctx, env, network, p)
		if err != nil {
			return res, err
		}
		took, k, err := measured(ctx, env, func() error { return env.NRI.RunPodSandbox(ctx, harness.RunRequest(p)) })
		if err != nil {
			return res, fmt.Errorf("RunPodSandbox %s: %w", p.Name, err)
		}
		times, calls = append(times, took), calls+k
		if err := removeCNI(ctx, env, guid, cni); err != nil {
			return res, err
		}
		if err := env.StopPod(ctx, p, guid); err != nil {
			return res, err
		}
		if err := env.RemovePod(ctx, p); err != nil {
			return res, err
		}
	}
	res.Start = Summarize(times)
	res.Calls = float64(calls) / float64(starts)
	return res, nil
}

// ChurnResult is one churn measurement.
type ChurnResult struct {
	Pods, Concurrency int
	HNSLatency        time.Duration
	Elapsed           time.Duration
	PodsPerSecond     float64
	Timeouts          int // NRI requests the runtime timed out
	Leaked            int // endpoints left after every pod was removed
}

// Churn starts and stops n pods, concurrency at a time, with every HNS call
// taking latency.
func Churn(ctx context.Context, env *harness.Env, n, concurrency, firstPort int, latency time.Duration) (ChurnResult, error) {
	res := ChurnResult{Pods: n, Concurrency: concurrency, HNSLatency: latency}
	if err := env.SimClient.SetLatency(ctx, latency); err != nil {
		return res, err
	}
	defer func() { _ = env.SimClient.SetLatency(context.WithoutCancel(ctx), 0) }()
	env.ResetInvocations()
	start := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	jobs := make(chan int)
	for range concurrency {
		wg.Go(func() {
			for i := range jobs {
				p := Pod("churn", i, firstPort+i)
				guid, err := env.RunPod(ctx, p)
				if err == nil {
					err = env.StopPod(ctx, p, guid)
				}
				if err == nil {
					err = env.RemovePod(ctx, p)
				}
				if err != nil {
					mu.Lock()
					firstErr = cmp(firstErr, err)
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.PodsPerSecond = float64(n) / res.Elapsed.Seconds()
	for _, inv := range env.Invocations() {
		if inv.Err != nil && (errors.Is(inv.Err, context.DeadlineExceeded) || strings.Contains(inv.Err.Error(), "deadline exceeded")) {
			res.Timeouts++
		}
	}
	if firstErr != nil {
		return res, firstErr
	}
	_ = env.SimClient.SetLatency(ctx, 0)
	err := harness.Eventually(ctx, time.Minute, func() error {
		st, _, err := env.SimClient.State(ctx)
		if err != nil {
			return err
		}
		res.Leaked = len(st.Endpoints)
		if res.Leaked > 0 {
			return fmt.Errorf("%d endpoints left", res.Leaked)
		}
		return nil
	})
	if err != nil && res.Leaked == 0 {
		return res, err
	}
	return res, nil
}

func cmp(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// Memory of a process, from /proc.
type Memory struct {
	RSS, Peak int64 // bytes: VmRSS, VmHWM
}

// ReadMemory reads VmRSS and VmHWM of pid.
func ReadMemory(pid int) (Memory, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return Memory{}, err
	}
	defer f.Close()
	var m Memory
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		if len(fields) == 0 {
			continue
		}
		kb, _ := strconv.ParseInt(fields[0], 10, 64)
		switch k {
		case "VmRSS":
			m.RSS = kb * 1024
		case "VmHWM":
			m.Peak = kb * 1024
		}
	}
	return m, sc.Err()
}

// HyperVResult is one measurement of Hyper-V pods' setups through ncproxy.
type HyperVResult struct {
	Setup       Percentiles
	Calls, NICs float64 // HNS calls and ncproxy AddNICs a setup
}

// HyperVSetups (issue 57): starts Hyper-V pods as the shim does with
// ncproxy, each with its CNI's endpoint in its namespace: ncproxy asks the
// NodeNetworkService at svc to set the pod's network up (timed, its HNS
// calls and AddNICs counted), then to tear it down, with every HNS call
// taking latency.
func HyperVSetups(ctx context.Context, env *harness.Env, ncp *harness.NCProxy, svc string, starts int, latency time.Duration) (HyperVResult, error) {
	var res HyperVResult
	network, err := cniNetworkOf(ctx, env)
	if err != nil {
		return res, err
	}
	if err := env.SimClient.SetLatency(ctx, latency); err != nil {
		return res, err
	}
	defer func() { _ = env.SimClient.SetLatency(context.WithoutCancel(ctx), 0) }()
	times := make([]time.Duration, 0, starts)
	calls, nics := 0, 0
	for i := range starts {
		p := Pod("hyperv", i, 36000+i)
		p.HyperV = true
		guid, cni, err := sandboxBesideCNI(ctx, env, network, p)
		if err != nil {
			return res, err
		}
		took, k, err := measured(ctx, env, func() error { return ncp.ConfigureNetworking(ctx, svc, p.ID, true) })
		if err != nil {
			return res, fmt.Errorf("setup of %s: %w", p.Name, err)
		}
		times, calls, nics = append(times, took), calls+k, nics+len(ncp.NICs(p.ID))
		if err := ncp.ConfigureNetworking(ctx, svc, p.ID, false); err != nil {
			return res, fmt.Errorf("teardown of %s: %w", p.Name, err)
		}
		if err := removeCNI(ctx, env, guid, cni); err != nil {
			return res, err
		}
		if err := env.RemovePod(ctx, p); err != nil {
			return res, err
		}
		// what the removal sets off (containerd's delete event, the
		// plugin's stop) is no setup's: the next is measured once HNS is
		// asked nothing for a while
		if err := quiet(ctx, env, 100*time.Millisecond); err != nil {
			return res, err
		}
	}
	res.Setup = Summarize(times)
	res.Calls, res.NICs = float64(calls)/float64(starts), float64(nics)/float64(starts)
	return res, nil
}

// StartHyperVPlugin starts the plugin serving the NodeNetworkService at
// svc, adding adapters through ncproxy at ncp.
func StartHyperVPlugin(ctx context.Context, env *harness.Env, svc, ncp string) error {
	cfg := Config + "[hyperv]\nnode_network_service = \"" + svc + "\"\nncproxy = \"" + ncp + "\"\n"
	if err := os.WriteFile(env.ConfigPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	if err := env.StartPlugin(ctx); err != nil {
		return err
	}
	return servedAt(ctx, svc)
}

// StartHyperVFloor builds the floor into dir and starts it serving the
// NodeNetworkService at svc.
func StartHyperVFloor(ctx context.Context, env *harness.Env, dir, svc, ncp string) error {
	bin, err := BuildNop(dir)
	if err != nil {
		return err
	}
	if err := env.StartBinary("floor", bin, "--node-network-service", svc, "--ncproxy", ncp,
		"--containerd", env.CtrAddress, "--hns", env.SimAddress); err != nil {
		return err
	}
	return servedAt(ctx, svc)
}

// servedAt waits until something listens at addr.
func servedAt(ctx context.Context, addr string) error {
	return harness.Eventually(ctx, 20*time.Second, func() error {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err
	})
}

// quiet waits until HNS is asked nothing for window.
func quiet(ctx context.Context, env *harness.Env, window time.Duration) error {
	_, last, err := env.SimClient.State(ctx)
	for err == nil {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(window):
		}
		var now map[string]int
		if _, now, err = env.SimClient.State(ctx); err == nil && maps.Equal(now, last) {
			return nil
		}
		last = now
	}
	return err
}

// sandboxBesideCNI creates p's sandbox and its CNI's endpoint in its
// namespace (the CNI's ADD), as containerd's CRI does before any plugin
// hears of the pod.
func sandboxBesideCNI(ctx context.Context, env *harness.Env, network string, p harness.Pod) (hcn.GUID, string, error) {
	guid, err := env.CreateSandbox(ctx, p)
	if err != nil {
		return "", "", err
	}
	cni, err := addCNIEndpoint(ctx, env, network, p.ID, guid, hcn.DNS{})
	return guid, cni, err
}

// removeCNI is the CNI's DEL of the endpoint cni in namespace guid.
func removeCNI(ctx context.Context, env *harness.Env, guid hcn.GUID, cni string) error {
	if err := env.SimClient.RemoveNamespaceEndpoint(ctx, guid, cni); err != nil {
		return err
	}
	return env.SimClient.DeleteEndpoint(ctx, cni)
}

// measured runs do, timed, and counts the HNS calls made meanwhile.
func measured(ctx context.Context, env *harness.Env, do func() error) (time.Duration, int, error) {
	_, before, err := env.SimClient.State(ctx)
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	if err := do(); err != nil {
		return 0, 0, err
	}
	took := time.Since(start)
	_, after, err := env.SimClient.State(ctx)
	calls := 0
	for op, k := range after {
		calls += k - before[op]
	}
	return took, calls, err
}
