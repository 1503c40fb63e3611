package plugin

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
)

// 1: after a sandbox's sync succeeds its retry delay starts over: a later
// failure waits the shortest delay, not the one the earlier failures grew.
func TestRetryDelayStartsOverAfterASuccess(t *testing.T) {
	lim := newDelays(time.Millisecond, time.Second)
	f := newFixture(t, withLimiter(lim))
	p := f.eventPod("p", "8080:80")
	if err := f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpCreateEndpoint, Kind: "unavailable", Count: 3}); err != nil {
		t.Fatal(err)
	}
	if err := startedAndWait(t, f, p); err != nil {
		t.Fatal(err)
	}
	grown := []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond}
	if got := lim.of("p"); !slices.Equal(got, grown) {
		t.Fatalf("retry delays %v, want %v", got, grown)
	}
	// later: the endpoint is detached behind the plugin's back, and the
	// repair's first attach fails once
	ep := f.endpoints("p")[0]
	if err := f.sim.RemoveNamespaceEndpoint(ctx, ep.Namespace, ep.ID); err != nil {
		t.Fatal(err)
	}
	if err := f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpAddNamespaceEndpoint, Kind: "unavailable", Count: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.core.ReconcileAll(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the repair is retried and attaches", func() bool {
		eps := f.endpoints("p")
		return len(eps) == 1 && eps[0].Namespace != ""
	})
	if got := lim.of("p"); !slices.Equal(got, append(grown, time.Millisecond)) {
		t.Fatalf("retry delays %v: the failure after a success did not start over at %v", got, time.Millisecond)
	}
}

// Issue 51: a reload acknowledged while a pod's create is in HNS judges
// that mapping by the new policy: the sync that decided with the old one
// is decided again once it commits, and the endpoint HNS made for it is
// removed, on both paths. (It stayed mapped for the pod's life.)
func TestAReloadDuringACreateJudgesItsMappingByTheNewPolicy(t *testing.T) {
	for _, path := range startPaths {
		t.Run(path.name, func(t *testing.T) {
			f := newFixture(t, admitting())
			p := f.eventPod("p", "9500:80")
			f.sim.SetOpLatency(hcnsim.OpCreateEndpoint, 200*time.Millisecond)
			done := path.start(f, p)
			eventually(t, "the create is in HNS", func() bool { return f.sim.Calls()[hcnsim.OpCreateEndpoint] == 1 })
			f.core.SetAdmission(rules("9500")) // the reload, acknowledged while the create runs
			waitResult(t, done)
			eventually(t, "the pod refused by the new policy, its endpoint gone", func() bool {
				return errors.Is(f.core.st.lastErr("p"), admission.ErrDenied) && len(f.endpoints("p")) == 0
			})
			never(t, 100*time.Millisecond, "the denied port mapped again", func() bool { return len(f.endpoints("p")) > 0 })
		})
	}
}

// ... and a policy that allows what the one before denied maps a pod
// whose refusal was decided with the old policy as the reload came.
func TestAReloadDuringARefusalJudgesThePodByTheNewPolicy(t *testing.T) {
	for _, path := range startPaths {
		t.Run(path.name, func(t *testing.T) {
			f := newFixture(t, admitting("9500"))
			p := f.eventPod("p", "9500:80")
			reloaded := make(chan struct{})
			f.store.hookSandbox(func(string) { // while the sync that refuses decides
				select {
				case <-reloaded:
				default:
					close(reloaded)
					f.core.SetAdmission(rules())
				}
			})
			waitResult(t, path.start(f, p))
			eventually(t, "the pod mapped under the policy in force", func() bool {
				eps := f.endpoints("p")
				return len(eps) == 1 && eps[0].Namespace != ""
			})
		})
	}
}

// Issue 55 (found by TestAnnotationWaitsForTheAPIServer, 1 run in 3): a
// retry left waiting by an earlier failure (containerd, here) that fires after a
// later sync held the pod back until the NetworkPolicies are read must
// not forget the pod: nothing was seen since that sync, whose outcome
// stands, so the policies read later map it.
func TestAStaleRetryKeepsAHeldBackPodForItsPolicies(t *testing.T) {
	f, ps, _ := policyFixture(t, retryEvery(200*time.Millisecond))
	p := webPod(f, "web")
	f.store.mu.Lock()
	f.store.failSandbox = fmt.Errorf("connecting to containerd at /run/containerd.sock: %w", ErrContainerd)
	f.store.mu.Unlock()
	f.started(p.ID)
	eventually(t, "containerd unreachable, the retry waiting", func() bool { return errors.Is(f.core.st.lastErr("web"), ErrContainerd) })
	f.store.mu.Lock()
	f.store.failSandbox = nil
	f.store.mu.Unlock()
	ps.publish(time.Now().Add(-2 * time.Minute)) // what was read is too old: host ports are held back
	f.started(p.ID)
	eventually(t, "held back until the policies are read", func() bool {
		return errors.Is(f.core.st.lastErr("web"), admission.ErrNetworkPolicyUnknown)
	})
	never(t, 500*time.Millisecond, "the held-back pod forgotten when the earlier retry fires", func() bool {
		return !errors.Is(f.core.st.lastErr("web"), admission.ErrNetworkPolicyUnknown)
	})
	ps.publish(time.Now())
	f.core.NetworkPoliciesChanged("")
	eventually(t, "mapped once the policies are read", func() bool { return len(f.endpoints("web")) == 1 })
}
