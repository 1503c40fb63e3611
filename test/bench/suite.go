// Package bench measures what the plugin costs a node, each figure side by
// side with its baseline in the same run: the event path and RunPodSandbox
// through the real NRI runtime side against the I/O floor and a do-nothing
// plugin, a start with hostPort on a node of 250 and 1,000 pods,
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
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

// Config is the plugin configuration for benchmarks: no periodic resync,
// so only the measured work runs.
const Config = `[plugin]
resync_interval = "0s"
` + harness.NetworkConfig

// ForSide is cfg as the side's plugin takes it: the plugin before the
// one-writer core (the "before" side) has no admission.pod_security key,
// and needs none (it does not check Pod Security).
func ForSide(side, cfg string) string {
	if side == "before" {
		return strings.Replace(cfg, harness.NoPodSecurity, "", 1)
	}
	return cfg
}

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

// Pod returns a benchmark pod with a mapping on hostPort.
func Pod(prefix string, i int, hostPort int) harness.Pod {
	h := sha256.Sum256([]byte(prefix + strconv.Itoa(i)))
	p := harness.Pod{ID: hex.EncodeToString(h[:]), Name: fmt.Sprintf("%s-%d", prefix, i), Namespace: "bench", UID: strconv.Itoa(i)}
	if hostPort > 0 {
		p.Annotations = map[string]string{request.AnnotationPortMappings: fmt.Sprintf("%d:80", hostPort)}
	}
	return p
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

// RunPodLatency times n RunPodSandbox round trips through the runtime side
// (the sandbox container is created beforehand, as containerd does, and not
// timed). Each pod is stopped and removed again, untimed.
func RunPodLatency(ctx context.Context, env *harness.Env, prefix string, n, firstPort int) ([]time.Duration, error) {
	out := make([]time.Duration, 0, n)
	for i := range n {
		p := Pod(prefix, i, firstPort+i%20000)
		guid, err := env.CreateSandbox(ctx, p)
		if err != nil {
			return nil, err
		}
		start := time.Now()
		err = env.NRI.RunPodSandbox(ctx, harness.RunRequest(p))
		out = append(out, time.Since(start))
		if err != nil {
			return nil, fmt.Errorf("RunPodSandbox %s: %w", p.Name, err)
		}
		if err := env.StopPod(ctx, p, guid); err != nil {
			return nil, err
		}
		if err := env.RemovePod(ctx, p); err != nil {
			return nil, err
		}
	}
	return out, nil
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
			if ep.Namespace != "" && strings.HasPrefix(ep.Name, hcn.DefaultEndpointPrefix) {
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

// addCNIEndpoint makes the pod's CNI endpoint in its namespace, as
// win-bridge's ADD does, with no port mapping.
func addCNIEndpoint(ctx context.Context, env *harness.Env, network, name string, guid hcn.GUID) (string, error) {
	ep, err := env.SimClient.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "cbr0_" + name, NetworkID: network})
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
	network, err := env.SimClient.CreateNetwork(ctx, cniNetwork)
	if err != nil {
		return res, err
	}
	for i, guid := range guids {
		if _, err := addCNIEndpoint(ctx, env, network.ID, fmt.Sprint("full-", i), guid); err != nil {
			return res, err
		}
	}
	if err := startPlugin(ctx, env, n); err != nil {
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
		guid, err := env.CreateSandbox(ctx, p)
		if err != nil {
			return res, err
		}
		cni, err := addCNIEndpoint(ctx, env, network.ID, p.ID, guid)
		if err != nil {
			return res, err
		}
		_, before, err := env.SimClient.State(ctx)
		if err != nil {
			return res, err
		}
		start := time.Now()
		err = env.NRI.RunPodSandbox(ctx, harness.RunRequest(p))
		times = append(times, time.Since(start))
		if err != nil {
			return res, fmt.Errorf("RunPodSandbox %s: %w", p.Name, err)
		}
		_, after, err := env.SimClient.State(ctx)
		if err != nil {
			return res, err
		}
		for op, k := range after {
			calls += k - before[op]
		}
		if err := env.SimClient.RemoveNamespaceEndpoint(ctx, guid, cni); err != nil {
			return res, err
		}
		if err := env.SimClient.DeleteEndpoint(ctx, cni); err != nil {
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
