package plugin

import (
	"errors"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
)

// loaded is a fixture whose manager has taken its first full listing, as
// after the runtime's Synchronize: only then does it trust its cache to say
// that a sandbox has no endpoint yet.
func loaded(t *testing.T) *fixture {
	t.Helper()
	f := newFixture(t)
	f.core.opt.Deadline = 5 * time.Second
	if _, err := f.core.Reconcile(ctx, nil); err != nil {
		t.Fatal(err)
	}
	return f
}

// A pod start asks containerd for the namespace while HNS creates the
// endpoint: the lookup finds the endpoint already being made. Sequentially
// (lookup, then create) the lookup would wait here in vain.
func TestStartCreatesWhileContainerdIsAsked(t *testing.T) {
	f := loaded(t)
	p := f.sandbox("a", "8080:80")
	sawCreate := false
	f.store.onSandbox = func(id string) {
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			if len(f.endpoints(id)) > 0 {
				sawCreate = true
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	if err := f.core.StartPod(ctx, p); err != nil {
		t.Fatal(err)
	}
	if !sawCreate {
		t.Fatal("the containerd lookup ran before the endpoint was created: the two did not overlap")
	}
	eps := f.endpoints("a")
	if len(eps) != 1 || eps[0].Namespace != f.store.sbs["a"].NetNS || len(eps[0].PortMappings) != 1 {
		t.Fatalf("endpoints: %+v", eps)
	}
	if n := f.core.Manager().KnownCount(); n != 1 {
		t.Fatalf("the manager knows %d sandboxes with endpoints, want 1", n)
	}
}

// What the lookup turns up that the early endpoint was not made for: it is
// deleted, its host ports are free again, and the pod gets what the
// sequential path decides. Each case goes through the early create (one
// CreateEndpoint, then its deletion).
func TestStartAheadUndoesWhatTheLookupRules(t *testing.T) {
	for _, tc := range []struct {
		name    string
		arrange func(f *fixture, p Pod)
		wantErr error // nil: the pod starts, skipped
	}{
		{"no Windows namespace", func(f *fixture, p Pod) { f.store.sbs[p.ID].NetNS = "" }, nil},
		{"Hyper-V isolated", func(f *fixture, p Pod) { f.store.sbs[p.ID].HyperV = "OCI spec: Windows.HyperV is set" }, ErrHyperV},
		{"sandbox not in containerd", func(f *fixture, p Pod) { delete(f.store.sbs, p.ID) }, ErrSandboxNotFound},
		{"stopped during the lookup", func(f *fixture, p Pod) {
			f.store.onSandbox = func(id string) { f.core.stopped.add(id) }
		}, nil},
		{"attach refused", func(f *fixture, _ Pod) {
			_ = f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpAddNamespaceEndpoint, Kind: "invalid", Count: 1})
		}, hcn.ErrInvalid},
		{"create refused, no Windows namespace", func(f *fixture, p Pod) {
			f.store.sbs[p.ID].NetNS = ""
			_ = f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpCreateEndpoint, Kind: "invalid", Count: 1})
		}, nil},
		{"no Windows namespace, the early endpoint's delete fails once", func(f *fixture, p Pod) {
			f.store.sbs[p.ID].NetNS = ""
			_ = f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpDeleteEndpoint, Kind: "internal", Count: 1})
		}, nil},
		{"Hyper-V isolated, the early endpoint's delete fails once", func(f *fixture, p Pod) {
			f.store.sbs[p.ID].HyperV = "OCI spec: Windows.HyperV is set"
			_ = f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpDeleteEndpoint, Kind: "internal", Count: 1})
		}, ErrHyperV},
		{"create refused", func(f *fixture, _ Pod) {
			_ = f.sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpCreateEndpoint, Kind: "invalid", Count: 1})
		}, hcn.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := loaded(t)
			p := f.sandbox("p", "8080:80")
			tc.arrange(f, p)
			err := f.core.StartPod(ctx, p)
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("StartPod: %v, want the pod started without an endpoint", err)
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Fatalf("StartPod: %v, want %v", err, tc.wantErr)
			}
			if n := f.sim.Calls()[hcnsim.OpCreateEndpoint]; n < 1 {
				t.Fatalf("%d CreateEndpoint calls: the start did not create early", n)
			}
			if st := f.sim.State(); len(st.Endpoints) != 0 {
				t.Fatalf("left behind: %+v", st.Endpoints)
			}
			// the host port is free: another pod takes it
			f.store.onSandbox = nil
			q := f.sandbox("q", "8080:80")
			if err := f.core.StartPod(ctx, q); err != nil {
				t.Fatalf("the next pod asking for the port: %v", err)
			}
		})
	}
}

// The early create applies only to a sandbox the cache knows to have no
// endpoint: before the first full listing, and for a sandbox with
// endpoints, the start sorts existing endpoints out first, asking
// containerd once.
func TestStartAheadOnlyForAFreshSandbox(t *testing.T) {
	f := newFixture(t) // not loaded
	f.core.opt.Deadline = 5 * time.Second
	p := f.sandbox("a", "8080:80")
	netID, err := f.core.Manager().EnsureNetwork(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// an endpoint of ours left with other mappings (a crash): replaced
	if _, err := f.sim.AddStaleEndpoint(hcn.EndpointSpec{Name: f.core.Manager().EndpointName("a"), NetworkID: netID,
		PortMappings: []hcn.PortMappingPolicy{{InternalPort: 80, ExternalPort: 9999, Protocol: 6}}}, ""); err != nil {
		t.Fatal(err)
	}
	lookups := 0
	f.store.onSandbox = func(string) { lookups++ }
	if err := f.core.StartPod(ctx, p); err != nil {
		t.Fatal(err)
	}
	eps := f.endpoints("a")
	if len(eps) != 1 || eps[0].PortMappings[0].ExternalPort != 8080 || eps[0].Namespace == "" {
		t.Fatalf("endpoints: %+v", eps)
	}
	if lookups != 1 {
		t.Fatalf("containerd asked %d times for the sandbox, want once", lookups)
	}
}
