package plugin

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
)

// hyperVPod makes sandbox id a Hyper-V pod whose record asks annotation,
// with the CNI's endpoint attached in its namespace first; it returns the
// CNI's endpoint.
func (f *fixture) hyperVPod(t *testing.T, id, annotation string) *hcn.Endpoint {
	t.Helper()
	f.sandbox(id, "")
	f.store.mu.Lock()
	f.store.sbs[id].HyperV = "runhcs runtime options: SandboxIsolation HYPERVISOR"
	f.store.sbs[id].Metadata = criRecord("pod-"+id, "default", annotation, "")
	ns := f.store.sbs[id].NetNS
	f.store.mu.Unlock()
	cni, err := f.sim.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "cni_" + id, NetworkID: f.natNetwork(t)})
	if err == nil {
		err = f.sim.AddNamespaceEndpoint(ctx, ns, cni.ID)
	}
	if err != nil {
		t.Fatal(err)
	}
	return cni
}

// natNetwork is the ID of a network the CNI's endpoints are made on.
func (f *fixture) natNetwork(t *testing.T) string {
	t.Helper()
	for _, n := range f.sim.State().Networks {
		if n.Name == "cni" {
			return n.ID
		}
	}
	n, err := f.sim.CreateNetwork(ctx, hcn.NetworkSpec{Name: "cni", Type: hcn.NetworkL2Bridge, Subnet: "10.244.0.0/24", Gateway: "10.244.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	return n.ID
}

func nodeNetwork(o *Options) { o.NodeNetwork = true }

func TestAHyperVPodNCProxySetsUpIsMappedBeforeItsTaskAndFreedAtTeardown(t *testing.T) {
	f := newFixture(t, nodeNetwork)
	cni := f.hyperVPod(t, "hv", "8080:80")
	f.store.mu.Lock()
	delete(f.store.tasks, "hv") // ncproxy asks before the sandbox's task exists
	f.store.mu.Unlock()

	got, err := f.core.SetUpHyperV(ctx, "hv")
	if err != nil || got.Refused != nil {
		t.Fatalf("SetUpHyperV = %+v, %v; want the pod mapped", got, err)
	}
	ours := f.endpoints("hv")
	if len(ours) != 1 || ours[0].Namespace != f.store.sbs["hv"].NetNS {
		t.Fatalf("our endpoints %+v, want one attached to the pod's namespace", ours)
	}
	want := []NIC{{EndpointID: cni.ID, EndpointName: cni.Name}, {EndpointID: ours[0].ID, EndpointName: ours[0].Name, Ours: true}}
	if !slices.Equal(got.NICs, want) {
		t.Fatalf("NICs %+v, want the CNI's first, then ours: %+v", got.NICs, want)
	}

	// the task starts: NRI's RunPodSandbox and containerd's event keep
	// what the service built, and refuse nothing
	f.store.mu.Lock()
	f.store.tasks["hv"] = TaskRunning
	f.store.mu.Unlock()
	if err := f.core.StartPod(ctx, Pod{ID: "hv", Name: "pod-hv", Namespace: "default", RuntimeHandler: "runhcs-wcow-hypervisor",
		Annotations: map[string]string{"hcn.nri.io/port-mappings": "8080:80"}}); err != nil {
		t.Fatalf("RunPodSandbox after the setup: %v", err)
	}
	if err := waitResult(t, f.started("hv")); err != nil {
		t.Fatalf("containerd's start after the setup: %v", err)
	}
	if n := f.sim.Calls()[hcnsim.OpCreateEndpoint]; n != 2 { // the CNI's and ours
		t.Fatalf("%d endpoints created, want ours once", n-1)
	}

	// a process-isolated pod asking the same port is told who holds it
	p := f.sandbox("proc", "8080:80")
	if _, err := f.start(p); !errors.As(err, new(*ConflictError)) || !strings.Contains(err.Error(), "default/pod-hv") {
		t.Fatalf("a process-isolated pod asking the Hyper-V pod's port: %v, want a conflict naming default/pod-hv", err)
	}

	f.core.TearDownHyperV(ctx, "hv")
	if eps := f.endpoints("hv"); len(eps) != 0 {
		t.Fatalf("after the teardown our endpoints are %+v, want none", eps)
	}
	if _, err := f.start(p); err != nil {
		t.Fatalf("the port after the teardown: %v, want it free", err)
	}
}

func TestAHyperVPodRefusedGetsTheCNIsNICAlone(t *testing.T) {
	tests := []struct {
		name       string
		annotation string
		want       error
	}{
		{"a bad annotation", "8080:80:tcp:extra", ErrInvalidPod},
		{"a port the node's rules deny", "3389:3389", admission.ErrDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nodeNetwork, admitting("3389"))
			cni := f.hyperVPod(t, "hv", tt.annotation)
			got, err := f.core.SetUpHyperV(ctx, "hv")
			if err != nil {
				t.Fatalf("SetUpHyperV: %v, want the pod's network set up without host ports", err)
			}
			if !errors.Is(got.Refused, tt.want) {
				t.Fatalf("Refused = %v, want %v", got.Refused, tt.want)
			}
			if want := []NIC{{EndpointID: cni.ID, EndpointName: cni.Name}}; !slices.Equal(got.NICs, want) {
				t.Fatalf("NICs %+v, want the CNI's alone %+v", got.NICs, want)
			}
			if eps := f.endpoints("hv"); len(eps) != 0 {
				t.Fatalf("a refused Hyper-V pod has endpoints %+v", eps)
			}
		})
	}
}

func TestAHyperVPodNCProxyDidNotSetUpIsRefusedSayingWhatToConfigure(t *testing.T) {
	tests := []struct {
		name        string
		nodeNetwork bool
		says        string
	}{
		{"no NodeNetworkService", false, "hyperv.node_network_service"},
		{"served, but ncproxy never asked", true, "NCProxyAddr"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, func(o *Options) { o.NodeNetwork = tt.nodeNetwork })
			f.hyperVPod(t, "hv", "8080:80")
			err := f.core.StartPod(ctx, Pod{ID: "hv", Partial: true})
			if !errors.Is(err, ErrHyperV) || !strings.Contains(err.Error(), tt.says) {
				t.Fatalf("StartPod = %v, want ErrHyperV saying %q", err, tt.says)
			}
			if n := f.sim.Calls()[hcnsim.OpCreateEndpoint]; n != 1 {
				t.Fatalf("%d endpoints of ours created for a Hyper-V pod ncproxy did not set up", n-1)
			}
		})
	}
}

func TestARestartKeepsAHyperVPodsEndpoint(t *testing.T) {
	f := newFixture(t, nodeNetwork)
	f.hyperVPod(t, "hv", "8080:80")
	if got, err := f.core.SetUpHyperV(ctx, "hv"); err != nil || got.Refused != nil {
		t.Fatalf("SetUpHyperV = %+v, %v", got, err)
	}
	before := f.endpoints("hv")
	f.restartWith(t, testManagerConfig(), nil) // a new process: nothing learned
	if err := f.core.LoadPorts(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if sum, err := f.core.ReconcileAll(ctx); err != nil || sum.Created+sum.Deleted != 0 {
			t.Fatalf("resync after a restart = %+v, %v: want the Hyper-V pod's endpoint kept", sum, err)
		}
	}
	if after := f.endpoints("hv"); len(after) != 1 || after[0].ID != before[0].ID {
		t.Fatalf("after a restart the Hyper-V pod's endpoints are %+v, want %+v kept", after, before)
	}
}

// The cost of a Hyper-V pod's setup: the HNS calls of the same pod's
// process-isolated start, plus the namespace's endpoints read once by the
// sync where the start does not read them (a pod whose record has its
// DNS): the VM's adapters come from that read, not from another.
func TestAHyperVSetupCostsAProcessStartsHNSCallsAndOneReadOfTheNamespace(t *testing.T) {
	calls := func(f *fixture, do func()) map[string]int {
		before := f.sim.Calls()
		do()
		out := map[string]int{}
		for op, n := range f.sim.Calls() {
			if d := n - before[op]; d != 0 {
				out[op] = d
			}
		}
		return out
	}
	tests := []struct {
		name  string
		dns   bool           // the record has the pod's DNS
		extra map[string]int // the setup's calls beyond the start's
	}{
		{"a record without DNS: the start reads the namespace too", false, map[string]int{}},
		{"a record with DNS: the setup reads the namespace once", true, map[string]int{hcnsim.OpGetNamespace: 1, hcnsim.OpGetEndpoint: 1, hcnsim.OpenedEndpoint: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, nodeNetwork)
			if err := f.core.LoadPorts(ctx); err != nil { // as the plugin starts
				t.Fatal(err)
			}
			pod := func(id, annotation string, hyperV bool) {
				f.hyperVPod(t, id, annotation)
				f.store.mu.Lock()
				defer f.store.mu.Unlock()
				if !hyperV {
					f.store.sbs[id].HyperV = ""
				}
				if tt.dns {
					f.store.sbs[id].Metadata = criMetaDNS(annotation, "10.96.0.10")
				}
			}
			pod("warm", "8070:80", false) // the network known, as on a node that runs pods
			if err := f.core.StartPod(ctx, Pod{ID: "warm", Partial: true}); err != nil {
				t.Fatal(err)
			}
			pod("proc", "8081:80", false)
			proc := calls(f, func() {
				if err := f.core.StartPod(ctx, Pod{ID: "proc", Partial: true}); err != nil {
					t.Fatal(err)
				}
			})
			pod("hv", "8080:80", true)
			var got HyperVNetwork
			hv := calls(f, func() {
				var err error
				if got, err = f.core.SetUpHyperV(ctx, "hv"); err != nil {
					t.Fatal(err)
				}
			})
			if len(got.NICs) != 2 {
				t.Fatalf("NICs %+v, want the CNI's and ours", got.NICs)
			}
			want := maps.Clone(proc)
			for op, n := range tt.extra {
				want[op] += n
			}
			if !maps.Equal(hv, want) {
				t.Fatalf("a Hyper-V setup asked HNS %v, want %v (a process-isolated start's %v and %v)", hv, want, proc, tt.extra)
			}
		})
	}
}

// A Hyper-V pod's setup and a process-isolated pod's start asking the same
// host port at once: one holds it, the other is told who does (a Hyper-V
// pod refused keeps the CNI's adapter), whichever wins.
func TestAHyperVSetupAndAProcessStartRacingForAPortOneWins(t *testing.T) {
	for range 20 {
		f := newFixture(t, nodeNetwork)
		f.hyperVPod(t, "hv", "8080:80")
		p := f.sandbox("proc", "8080:80")
		var (
			hv          HyperVNetwork
			hvErr, pErr error
			done        = make(chan struct{})
		)
		go func() { defer close(done); hv, hvErr = f.core.SetUpHyperV(ctx, "hv") }()
		pErr = f.core.StartPod(ctx, p)
		<-done
		if hvErr != nil {
			t.Fatalf("SetUpHyperV: %v", hvErr)
		}
		hvHolds, procHolds := hv.Refused == nil, pErr == nil
		if hvHolds == procHolds {
			t.Fatalf("the Hyper-V pod refused: %v, the process pod: %v; want exactly one holding the port", hv.Refused, pErr)
		}
		loser := pErr
		if procHolds {
			loser = hv.Refused
			if len(hv.NICs) != 1 || hv.NICs[0].Ours {
				t.Fatalf("the refused Hyper-V pod's adapters %+v, want the CNI's alone", hv.NICs)
			}
		}
		if !errors.As(loser, new(*ConflictError)) {
			t.Fatalf("the loser was told %v, want a conflict naming the holder", loser)
		}
		if n := len(f.endpoints("hv")) + len(f.endpoints("proc")); n != 1 {
			t.Fatalf("%d endpoints of ours for one port", n)
		}
	}
}

// A Hyper-V pod's utility VM takes our endpoint only through ncproxy's
// Setup: an endpoint made for the pod at any other time would hold its
// host port and never carry a packet. After the Setup's work is done,
// whatever it came to, a resync neither makes the endpoint again (HNS
// lost it), nor makes a new one for a changed request, nor makes one the
// Setup refused (a reload admits it now): the pod is told to be
// restarted, and its host port is free.
func TestAHyperVPodGetsAnEndpointOnlyFromNCProxysSetup(t *testing.T) {
	tests := []struct {
		name       string
		annotation string
		after      func(t *testing.T, f *fixture)
		says       string // besides the restart: the Setup's own refusal
	}{
		{"HNS lost the endpoint the Setup made", "8080:80", func(t *testing.T, f *fixture) {
			for _, ep := range f.endpoints("hv") {
				if err := errors.Join(f.sim.RemoveNamespaceEndpoint(ctx, ep.Namespace, ep.ID), f.sim.DeleteEndpoint(ctx, ep.ID)); err != nil {
					t.Fatal(err)
				}
			}
		}, ""},
		{"the pod now asks another port: the endpoint would be made anew", "8080:80", func(t *testing.T, f *fixture) {
			f.store.mu.Lock()
			f.store.sbs["hv"].Metadata = criRecord("pod-hv", "default", "8081:80", "")
			f.store.mu.Unlock()
		}, ""},
		{"a reload admits the port the Setup was refused", "8443:443", func(t *testing.T, f *fixture) {
			f.core.SetAdmission(rules())
		}, "its setup was refused: pod default/pod-hv: mapping 8443:443/tcp denied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := &reports{}
			f := newFixture(t, nodeNetwork, admitting("8443"), func(o *Options) { o.Reporter = rep })
			f.hyperVPod(t, "hv", tt.annotation)
			if _, err := f.core.SetUpHyperV(ctx, "hv"); err != nil {
				t.Fatal(err)
			}
			tt.after(t, f)
			if _, err := f.core.ReconcileAll(ctx); err != nil {
				t.Fatal(err)
			}
			never(t, 100*time.Millisecond, "an endpoint of ours for the Hyper-V pod", func() bool { return len(f.endpoints("hv")) > 0 })
			r, _ := rep.last()
			if r.Mapped || r.Reason != ReasonHyperV || !strings.Contains(r.Err.Error(), "restart") || !strings.Contains(r.Err.Error(), tt.says) {
				t.Fatalf("the pod's report %+v, want unmapped, Hyper-V, saying to restart the pod and %q", r, tt.says)
			}
			p := f.sandbox("proc", strings.Split(tt.annotation, ":")[0]+":80")
			if _, err := f.start(p); err != nil {
				t.Fatalf("a process-isolated pod asking the port: %v, want it free", err)
			}
		})
	}
}

// A listing of HNS taken before ncproxy's Setup made the endpoint, and
// told to the sandbox after the Setup's commit (a resync running beside
// the Setup), says only that HNS must be asked: the endpoint the Setup
// made is found in place and kept, the pod stays mapped. Seen in CI: the
// resync containerd's subscription asks for removed the endpoint and
// refused the pod.
func TestAHyperVPodsEndpointOutlivesAListingTakenBeforeItsSetup(t *testing.T) {
	rep := &reports{}
	f := newFixture(t, nodeNetwork, func(o *Options) { o.Reporter = rep })
	f.hyperVPod(t, "hv", "8080:80")
	stale, err := f.core.listing(ctx) // the resync lists HNS before the Setup's create
	if err != nil || len(stale["hv"]) != 0 {
		t.Fatalf("the listing before the Setup: %v, %v", stale, err)
	}
	if _, err := f.core.SetUpHyperV(ctx, "hv"); err != nil {
		t.Fatal(err)
	}
	made := f.endpoints("hv")
	if len(made) != 1 {
		t.Fatalf("the Setup made %d endpoints, want one", len(made))
	}
	results := make(chan result, 1)
	f.core.enqueue("hv", sighting{pod: &Pod{ID: "hv", Partial: true}, claim: true, listing: true, listed: stale["hv"],
		wait: &waiter{first: true, ch: results}})
	if r := <-results; r.err != nil || r.change != Kept {
		t.Fatalf("the stale listing's sync: %v, %v; want the endpoint kept", r.change, r.err)
	}
	never(t, 100*time.Millisecond, "the Setup's endpoint gone", func() bool {
		eps := f.endpoints("hv")
		return len(eps) != 1 || eps[0].ID != made[0].ID
	})
	if r, _ := rep.last(); !r.Mapped {
		t.Fatalf("the pod's report %+v, want it mapped", r)
	}
}
