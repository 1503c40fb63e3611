package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

// These benchmarks need root and containerd (`make containerd`), like the
// end-to-end tests. `make bench` runs the full suite and writes the report.

func newEnv(b *testing.B, config ...string) (*harness.Env, context.Context) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	cfg := Config
	if len(config) > 0 {
		cfg = config[0]
	}
	env, err := harness.Start(ctx, harness.Options{Config: cfg})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(env.Close)
	return env, ctx
}

// BenchmarkRunPodSandbox: one RunPodSandbox round trip through the NRI
// runtime side, the plugin against the do-nothing baseline and against the
// floor (a plugin making only the calls a start needs), for each DNS shape
// of a pod.
func BenchmarkRunPodSandbox(b *testing.B) {
	for _, dns := range []DNS{KubeletDNS, CNIDNS, NoDNS} {
		for _, which := range []string{"nop", "floor", "plugin"} {
			b.Run(fmt.Sprintf("dns=%s/%s", dns.Short(), which), func(b *testing.B) {
				env, ctx := newEnv(b)
				if which == "plugin" {
					if err := env.StartPlugin(ctx); err != nil {
						b.Fatal(err)
					}
				} else if err := StartBaseline(ctx, env, b.TempDir(), which == "floor"); err != nil {
					b.Fatal(err)
				}
				runPods(b, ctx, env, Starts{DNS: dns, Prefix: "rp", FirstPort: 20000})
			})
		}
	}
}

// BenchmarkRunPodSandboxOnAFullNode: RunPodSandbox on a node of 5,000 pods
// with their endpoints (made by the plugin's Synchronize), for the plugin
// and for the I/O floor on the same kind of node: the ratio tells what the
// plugin adds from what a full containerd and HNS cost.
func BenchmarkRunPodSandboxOnAFullNode(b *testing.B) {
	for _, which := range []string{"floor", "plugin"} {
		b.Run(which, func(b *testing.B) {
			env, ctx := newEnv(b)
			var err error
			if which == "floor" {
				err = FillForTheFloor(ctx, env, b.TempDir(), 5000)
			} else {
				_, err = Synchronize(ctx, env, 5000, 25000)
			}
			if err != nil {
				b.Fatal(err)
			}
			runPods(b, ctx, env, Starts{Prefix: "full", FirstPort: 35000})
		})
	}
}

// BenchmarkRunPodSandboxWithARange: RunPodSandbox of a pod mapping an RTP
// block of 1,000 UDP ports in one annotation entry (issue 56), for the
// plugin and for the floor making the same calls (containerd's record,
// the node's sockets on the 1,000 ports, HNS's create with 1,000
// policies, the attach): what the plugin adds per policy.
func BenchmarkRunPodSandboxWithARange(b *testing.B) {
	for _, which := range []string{"floor", "plugin"} {
		b.Run(which, func(b *testing.B) {
			env, ctx := newEnv(b)
			if which == "plugin" {
				if err := env.StartPlugin(ctx); err != nil {
					b.Fatal(err)
				}
			} else if err := StartBaseline(ctx, env, b.TempDir(), true); err != nil {
				b.Fatal(err)
			}
			runPods(b, ctx, env, Starts{Prefix: "range", FirstPort: 22000, Width: 1000})
		})
	}
}

// runPods times one RunPodSandbox round trip per iteration (pods of s's
// shape, names from s.Prefix, host ports from s.FirstPort) and reports the
// percentiles and the HNS calls per start.
func runPods(b *testing.B, ctx context.Context, env *harness.Env, s Starts) {
	var total []time.Duration
	calls := 0
	prefix, first := s.Prefix, s.FirstPort
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		s.N, s.Prefix, s.FirstPort = 1, fmt.Sprintf("%s%d", prefix, len(total)), first+len(total)
		d, n, err := RunPodLatency(ctx, env, s)
		b.StartTimer()
		if err != nil {
			b.Fatal(err)
		}
		total, calls = append(total, d...), calls+n
	}
	report(b, total, calls)
}

// report gives the percentiles of d and the HNS calls per start as the
// benchmark's figures.
func report(b *testing.B, d []time.Duration, calls int) {
	p := Summarize(d)
	b.ReportMetric(0, "ns/op") // the loop time includes untimed setup; the percentiles are the figures
	b.ReportMetric(float64(p.P50.Microseconds()), "p50-µs")
	b.ReportMetric(float64(p.P99.Microseconds()), "p99-µs")
	b.ReportMetric(float64(calls)/float64(max(len(d), 1)), "hns-calls/start")
}

// BenchmarkSynchronize: the plugin's answer to Synchronize at several pod
// counts (the reconcile completes in the background). Run it with
// -benchtime 1x: each iteration builds a fresh node.
func BenchmarkSynchronize(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				env, ctx := newEnv(b)
				b.StartTimer()
				res, err := Synchronize(ctx, env, n, 25000)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(0, "ns/op")
				b.ReportMetric(float64(res.Answer.Microseconds()), "answer-µs")
				b.ReportMetric(float64(res.Complete.Milliseconds()), "complete-ms")
				b.ReportMetric(float64(res.RSS.Peak)/(1<<20), "peak-MiB")
			}
		})
	}
}

// BenchmarkAnnotation: a pod author's annotation up to 256 KiB. Parse grows
// linearly (compare ns/op per byte across sizes); the pod start with the
// default limits is decided in microseconds at any size. Needs no root.
func BenchmarkAnnotation(b *testing.B) {
	c := DecisionCore()
	b.Cleanup(c.Close)
	for _, form := range []string{"compact", "list"} {
		for _, size := range AnnotationSizes() {
			v := Annotation(form, size)
			b.Run(fmt.Sprintf("%s/%dKiB/parse-unlimited", form, size>>10), ParseUnlimited(v))
			b.Run(fmt.Sprintf("%s/%dKiB/start-decision", form, size>>10), StartDecision(c, v))
		}
	}
}

// BenchmarkEventPath: /tasks/start published -> endpoint attached, the path
// stock containerd on Windows uses, with HNS at 0 and 50 ms per call.
func BenchmarkEventPath(b *testing.B) {
	for _, latency := range []time.Duration{0, 50 * time.Millisecond} {
		b.Run(fmt.Sprintf("hns=%s", latency), func(b *testing.B) {
			env, ctx := newEnv(b, EventConfig)
			if err := env.StartPluginEvents(ctx); err != nil {
				b.Fatal(err)
			}
			var total []time.Duration
			calls := 0
			for b.Loop() {
				b.StopTimer()
				d, n, err := EventLatency(ctx, env, Starts{Prefix: fmt.Sprintf("ev%d", len(total)), N: 1, FirstPort: 21000 + len(total), HNS: latency})
				b.StartTimer()
				if err != nil {
					b.Fatal(err)
				}
				total, calls = append(total, d...), calls+n
			}
			report(b, total, calls)
		})
	}
}

// BenchmarkEventChurn: pods started and stopped through containerd events,
// 50 at a time, every HNS call taking 50 ms, at two caps of HNS calls in
// flight, with HNS answering in parallel or one call at a time. Run with
// -benchtime 1x.
func BenchmarkEventChurn(b *testing.B) {
	for _, tt := range []struct {
		cap        int
		serialized bool
		pods       int
	}{{4, false, 1000}, {12, false, 1000}, {12, true, 100}, {64, true, 100}} {
		b.Run(fmt.Sprintf("cap=%d/serialized=%v", tt.cap, tt.serialized), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				env, ctx := newEnv(b, EventConfigCap(tt.cap))
				if err := env.StartPluginEvents(ctx); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				res, err := EventChurn(ctx, env, tt.pods, 50, 40000, 50*time.Millisecond, tt.serialized)
				if err != nil {
					b.Fatal(err)
				}
				reportChurn(b, res)
			}
		})
	}
}

// BenchmarkGameServerChurn (issue 56): 300 game servers as Agones makes
// them (a UDP hostPort each, from the CRI record: the plugin reads the
// pod's namespace's endpoints too, for a CNI that may map it) started and
// stopped through containerd events, 50 at a time, every HNS call taking
// 50 ms, at the default cap. Run with -benchtime 1x.
func BenchmarkGameServerChurn(b *testing.B) {
	for b.Loop() {
		b.StopTimer()
		env, ctx := newEnv(b, EventConfig)
		if err := env.StartPluginEvents(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		res, err := GameServerChurn(ctx, env)
		if err != nil {
			b.Fatal(err)
		}
		reportChurn(b, res)
	}
}

// reportChurn gives a churn's figures as the benchmark's.
func reportChurn(b *testing.B, res EventChurnResult) {
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(res.PodsPerSecond, "pods/s")
	b.ReportMetric(float64(res.StartLatency.P50.Milliseconds()), "start-p50-ms")
	b.ReportMetric(float64(res.StartLatency.P99.Milliseconds()), "start-p99-ms")
	b.ReportMetric(res.PeakGoroutines, "peak-goroutines")
	b.ReportMetric(float64(res.PeakRSS)/(1<<20), "peak-rss-MiB")
	b.ReportMetric(float64(res.Leaked), "leaked")
}

// BenchmarkStartOnAFullNode (issue 26): RunPodSandbox of a pod whose
// mapping comes from hostPort, on a node of 250 and of 1,000 running pods
// (each with its CNI's endpoint too), HNS at 10 ms a call: the start and
// its HNS calls must not grow with the pod count. Run with -benchtime 1x.
func BenchmarkStartOnAFullNode(b *testing.B) {
	for _, n := range []int{250, 1000} {
		b.Run(fmt.Sprintf("pods=%d", n), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				env, ctx := newEnv(b)
				res, err := StartOnAFullNode(ctx, env, n, 30, 10*time.Millisecond)
				b.StartTimer()
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(0, "ns/op")
				b.ReportMetric(float64(res.Start.P50.Microseconds()), "p50-µs")
				b.ReportMetric(float64(res.Start.P99.Microseconds()), "p99-µs")
				b.ReportMetric(res.Calls, "hns-calls/start")
			}
		})
	}
}

// BenchmarkHyperVSetup (issue 57): a Hyper-V pod's network set up through
// ncproxy, as the shim asks it, for the plugin and for the floor making
// the same calls (containerd's record, the namespace's endpoints, the
// node's sockets, HNS's create and attach, one AddNIC per endpoint): what
// the plugin adds to a Hyper-V start. HNS answers at once, then at 10 ms a
// call.
func BenchmarkHyperVSetup(b *testing.B) {
	for _, latency := range []time.Duration{0, 10 * time.Millisecond} {
		for _, which := range []string{"floor", "plugin"} {
			b.Run(fmt.Sprintf("hns=%s/%s", latency, which), func(b *testing.B) {
				for b.Loop() {
					b.StopTimer()
					env, ctx := newEnv(b)
					ncp, err := harness.StartNCProxy(env.SimClient)
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(ncp.Close)
					svc, err := harness.FreeLoopbackAddr()
					if err != nil {
						b.Fatal(err)
					}
					if which == "floor" {
						err = StartHyperVFloor(ctx, env, b.TempDir(), svc, ncp.Addr)
					} else {
						err = StartHyperVPlugin(ctx, env, svc, ncp.Addr)
					}
					if err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					res, err := HyperVSetups(ctx, env, ncp, svc, 30, latency)
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(0, "ns/op")
					b.ReportMetric(float64(res.Setup.P50.Microseconds()), "p50-µs")
					b.ReportMetric(float64(res.Setup.P99.Microseconds()), "p99-µs")
					b.ReportMetric(res.Calls, "hns-calls/start")
					b.ReportMetric(res.NICs, "addnic/start")
				}
			})
		}
	}
}
