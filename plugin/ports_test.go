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
			if _, err := x.reserve("a", "ns/a", tt.held); err != nil {
				t.Fatal(err)
			}
			_, err := x.reserve("b", "ns/b", tt.want)
			if !tt.conflict {
				if err != nil {
					t.Fatalf("reserve: %v", err)
				}
				return
			}
			var ce *ConflictError
			if !errors.As(err, &ce) || !errors.Is(err, ErrPortConflict) || ce.HolderID != "a" || !strings.Contains(err.Error(), "pod ns/a") {
				t.Fatalf("reserve: %v, want a conflict naming pod ns/a", err)
			}
		})
	}
}

func TestPortIndexLifecycle(t *testing.T) {
	x := newState()
	web := []hcn.PortMappingPolicy{pp(hcn.TCP, 8080, "", 1)}
	if _, err := x.reserve("a", "ns/a", web); err != nil {
		t.Fatal(err)
	}
	// the same pod may re-reserve (replace) its own ports
	undo, err := x.reserve("a", "ns/a", []hcn.PortMappingPolicy{pp(hcn.TCP, 8081, "", 1)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := x.reserve("b", "ns/b", web); err != nil {
		t.Fatalf("8080 should be free after a moved to 8081: %v", err)
	}
	x.release("b")
	undo() // a's failed change is undone: a holds 8080 again
	if _, err := x.reserve("b", "ns/b", web); err == nil {
		t.Fatal("undo did not restore a's port")
	}
	x.release("a")
	if _, err := x.reserve("b", "ns/b", web); err != nil {
		t.Fatalf("after release: %v", err)
	}
	// a listing of HNS adopts what the state does not know, and does not
	// override what it knows
	start := x.startListing()
	x.applyListing(start, map[string][]hcn.Endpoint{
		"b": {{ID: "EB", PortMappings: []hcn.PortMappingPolicy{pp(hcn.TCP, 9999, "", 1)}}},
		"c": {{ID: "EC", PortMappings: []hcn.PortMappingPolicy{pp(hcn.UDP, 53, "", 1)}}},
	})
	if _, err := x.reserve("d", "", []hcn.PortMappingPolicy{pp(hcn.UDP, 53, "", 1)}); err == nil || !strings.Contains(err.Error(), "sandbox c") {
		t.Fatalf("adopted port: %v", err)
	}
	if _, err := x.reserve("d", "", []hcn.PortMappingPolicy{pp(hcn.TCP, 9999, "", 1)}); err != nil {
		t.Fatalf("the listing overrode a known pod: %v", err)
	}
	if n := x.counts().holding; n != 3 {
		t.Errorf("index holds %d pods, want 3", n)
	}
}
