package plugin

import (
	"errors"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

func TestAClaimConflictsWhereHNSWould(t *testing.T) {
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

func TestAPortGoesFreeWhenItsHolderMovesOrLetsGo(t *testing.T) {
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

// A claim holds its ports from the moment it is made until its sandbox's
// commit: another sandbox's claim meanwhile conflicts with it, naming the
// claimer; a commit that failed releases them, one that succeeded confirms
// them (and says how often the holder was confirmed).
func TestAClaimHoldsItsPortsUntilItsCommit(t *testing.T) {
	x := newState()
	web := []hcn.PortMappingPolicy{pp(hcn.TCP, 8080, "", 1)}
	for _, id := range []string{"a", "b"} {
		x.trigger(id, sighting{})
	}
	if ce := x.claim("a", "ns/a", web); ce != nil {
		t.Fatalf("a's claim: %v", ce)
	}
	ce := x.claim("b", "ns/b", web)
	if ce == nil || ce.HolderID != "a" || ce.Holder != "ns/a" || ce.confirmed != 0 {
		t.Fatalf("b's claim while a's is pending: %+v, want a conflict naming ns/a, never confirmed", ce)
	}
	sn, _ := x.snapshot("a", 1)
	x.commit("a", sn, sn.known, false) // a's sync failed: nothing confirmed
	if ce := x.claim("b", "ns/b", web); ce != nil {
		t.Fatalf("b's claim after a's failed commit: %v, want the port released", ce)
	}
	if ce := x.claim("a", "ns/a", web); ce == nil || ce.HolderID != "b" || ce.Holder != "ns/b" {
		t.Fatalf("a's claim while b's is pending: %+v", ce)
	}
	sn, _ = x.snapshot("b", 1)
	k := sn.known
	k.ports, k.eps, k.epsKnown, k.confirmed, k.name = web, []hcn.Endpoint{{ID: "Eb", PortMappings: web}}, true, 1, "ns/b"
	x.commit("b", sn, k, false)
	if ce := x.claim("a", "ns/a", web); ce == nil || ce.HolderID != "b" || ce.confirmed != 1 {
		t.Fatalf("a's claim after b's commit: %+v, want a conflict with b, confirmed once", ce)
	}
}
