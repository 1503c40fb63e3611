package plugin

import (
	"errors"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

func pp(proto hcn.Protocol, port uint16, vip string, flags hcn.NatFlags) hcn.PortMappingPolicy {
	return hcn.PortMappingPolicy{Protocol: proto, ExternalPort: port, InternalPort: 80, VIP: vip, Flags: flags}
}

func TestPortIndexConflicts(t *testing.T) {
	tests := []struct {
		name     string
		held     []hcn.PortMappingPolicy
		want     []hcn.PortMappingPolicy
		conflict bool
	}{
		{"same port, both wildcard", []hcn.PortMappingPolicy{pp(hcn.TCP, 80, "", 1)}, []hcn.PortMappingPolicy{pp(hcn.TCP, 80, "", 1)}, true},
		{"wildcard vs specific", []hcn.PortMappingPolicy{pp(hcn.TCP, 80, "", 1)}, []hcn.PortMappingPolicy{pp(hcn.TCP, 80, "10.0.0.4", 1)}, true},
		{"specific vs wildcard", []hcn.PortMappingPolicy{pp(hcn.TCP, 80, "10.0.0.4", 1)}, []hcn.PortMappingPolicy{pp(hcn.TCP, 80, "", 1)}, true},
		{"same specific", []hcn.PortMappingPolicy{pp(hcn.TCP, 80, "10.0.0.4", 1)}, []hcn.PortMappingPolicy{pp(hcn.TCP, 80, "10.0.0.4", 1)}, true},
		{"different specific", []hcn.PortMappingPolicy{pp(hcn.TCP, 80, "10.0.0.4", 1)}, []hcn.PortMappingPolicy{pp(hcn.TCP, 80, "10.0.0.5", 1)}, false},
		{"other protocol", []hcn.PortMappingPolicy{pp(hcn.TCP, 80, "", 1)}, []hcn.PortMappingPolicy{pp(hcn.UDP, 80, "", 1)}, false},
		{"other port", []hcn.PortMappingPolicy{pp(hcn.TCP, 80, "", 1)}, []hcn.PortMappingPolicy{pp(hcn.TCP, 81, "", 1)}, false},
		{"v4 wildcard vs v6 wildcard", []hcn.PortMappingPolicy{pp(hcn.TCP, 80, "", 1)}, []hcn.PortMappingPolicy{pp(hcn.TCP, 80, "", 3)}, false},
		{"v6 wildcard vs v6 specific", []hcn.PortMappingPolicy{pp(hcn.TCP, 80, "", 3)}, []hcn.PortMappingPolicy{pp(hcn.TCP, 80, "fd00::4", 3)}, true},
		{"second VIP of the holder", []hcn.PortMappingPolicy{pp(hcn.TCP, 80, "10.0.0.4", 1), pp(hcn.TCP, 80, "10.0.0.5", 1)},
			[]hcn.PortMappingPolicy{pp(hcn.TCP, 80, "10.0.0.5", 1)}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := newState()
			hold(x, "a", "ns/a", tt.held)
			err := x.claim("b", "", tt.want)
			if !tt.conflict {
				if err != nil {
					t.Fatalf("conflict: %v", err)
				}
				return
			}
			var ce *ConflictError
			if !errors.As(err, &ce) || !errors.Is(err, ErrPortConflict) || ce.HolderID != "a" || !strings.Contains(err.Error(), "pod ns/a") {
				t.Fatalf("conflict: %v, want a conflict naming pod ns/a", err)
			}
		})
	}
}

// hold commits, as a sync of id would, that id holds policies.
func hold(x *state, id, name string, policies []hcn.PortMappingPolicy) {
	x.trigger(id, sighting{})
	sn, _ := x.snapshot(id, 1)
	k := sn.known
	k.ports, k.name, k.epsKnown = policies, name, true
	if len(policies) > 0 {
		k.eps = []hcn.Endpoint{{ID: "E" + id, PortMappings: policies}}
	} else {
		k.eps = nil
	}
	x.commit(id, sn, k, false)
}

func TestPortIndexLifecycle(t *testing.T) {
	x := newState()
	x.markLoaded()
	web := []hcn.PortMappingPolicy{pp(hcn.TCP, 8080, "", 1)}
	hold(x, "a", "ns/a", web)
	if err := x.claim("a", "", web); err != nil {
		t.Fatalf("a pod conflicts with its own ports: %v", err)
	}
	hold(x, "a", "ns/a", []hcn.PortMappingPolicy{pp(hcn.TCP, 8081, "", 1)}) // a moved to 8081
	if err := x.claim("b", "", web); err != nil {
		t.Fatalf("8080 should be free after a moved to 8081: %v", err)
	}
	if err := x.claim("b", "", []hcn.PortMappingPolicy{pp(hcn.TCP, 8081, "", 1)}); err == nil {
		t.Fatal("a's new port is free")
	}
	hold(x, "a", "ns/a", nil) // a gave its ports back: its record goes
	if err := x.claim("b", "", []hcn.PortMappingPolicy{pp(hcn.TCP, 8081, "", 1)}); err != nil {
		t.Fatalf("after release: %v", err)
	}
	if c := x.counts(); c.records != 0 || c.holding != 0 {
		t.Errorf("the state keeps %+v", c)
	}
}

// Step 0 of a sync: what a listing of HNS showed is what a sandbox known to
// nobody holds (its ports join the index); for a sandbox the state knows,
// a listing that agrees changes nothing and one that disagrees makes the
// next sync ask HNS. A listing alone decides nothing and does no I/O.
func TestListingIsLearnedOrDoubted(t *testing.T) {
	f := newFixture(t)
	f.store.failSandbox = errors.New("containerd must not be asked")
	mk := func(id string, port uint16) []hcn.Endpoint {
		return []hcn.Endpoint{{ID: "E" + id, Name: f.core.mgr.EndpointName(id), PortMappings: []hcn.PortMappingPolicy{pp(hcn.TCP, port, "", 1)}}}
	}
	hold(f.core.st, "known", "ns/known", mk("known", 9000)[0].PortMappings)
	hold(f.core.st, "agrees", "ns/agrees", mk("agrees", 9001)[0].PortMappings)
	for id, eps := range map[string][]hcn.Endpoint{"new": mk("new", 9002), "known": mk("known", 9100), "agrees": mk("agrees", 9001)} {
		f.core.st.trigger(id, sighting{learn: true, listing: true, listed: eps})
		sn, _ := f.core.st.snapshot(id, 1)
		o := f.core.sync(ctx, sn)
		if o.err != nil || o.change != NoChange {
			t.Fatalf("%s: %v, %v: a listing alone decided something", id, o.change, o.err)
		}
		f.core.st.commit(id, sn, o.known, false)
		switch id {
		case "new":
			if !o.known.epsKnown || !sameEndpoints(o.known.eps, eps) || !hcn.SamePolicies(o.known.ports, eps[0].PortMappings) {
				t.Errorf("new: %+v, want the listing adopted", o.known)
			}
		case "known":
			if o.known.epsKnown {
				t.Errorf("known: %+v, want HNS asked next time (the listing disagrees)", o.known)
			}
		case "agrees":
			if !o.known.epsKnown || o.known.eps[0].ID != "Eagrees" {
				t.Errorf("agrees: %+v, want what was known kept", o.known)
			}
		}
	}
	if err := f.core.st.claim("x", "", mk("x", 9002)[0].PortMappings); err == nil || !strings.Contains(err.Error(), "sandbox new") {
		t.Fatalf("the adopted port: %v", err)
	}
	if err := f.core.st.claim("x", "", mk("x", 9000)[0].PortMappings); err == nil {
		t.Fatal("a port held by a sandbox whose listing disagrees was given away before HNS was asked")
	}
}
