package hcn_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
)

// Issue 30: policies as public sources quote them (hcn/testdata/readback,
// each file naming its source) are read by the adapter's decoder, and an
// endpoint HNS reads back so matches what the plugin asks for: a restart
// adopts it, never rebuilds it.
func TestPublicReadBacks(t *testing.T) {
	files, err := filepath.Glob("testdata/readback/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no read-backs: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var doc struct {
				Source string
				Policy *struct {
					Type     string
					Settings json.RawMessage
				}
				Want     hcn.PortMappingPolicy
				Request  map[string]any
				Response map[string]any
			}
			if err := json.Unmarshal(b, &doc); err != nil || !strings.HasPrefix(doc.Source, "https://") {
				t.Fatalf("%s: %v; every read-back names its source", f, err)
			}
			if doc.Policy == nil { // the DNS fill-in: the simulator answers in its shape
				sim := hcnsim.New()
				nat, _ := sim.CreateNetwork(ctx, hcn.NetworkSpec{Name: "nat", Type: hcn.NetworkNAT})
				ep, err := sim.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "x", NetworkID: nat.ID})
				if err != nil || doc.Request["DNSServerList"] != "" || doc.Response["DNSServerList"] == "" ||
					len(ep.DNS.ServerList) != 1 || ep.DNS.Domain == "" {
					t.Fatalf("the simulator's answer %+v (%v) is not the shape the issue quotes: %v", ep.DNS, err, doc.Response)
				}
				return
			}
			var got hcn.PortMappingPolicy
			switch doc.Policy.Type {
			case "NAT":
				var ok bool
				if got, ok = hcn.DecodeV1NAT(b2(t, b)); !ok {
					t.Fatalf("the v1 NAT policy does not decode")
				}
			case "PortMapping":
				if got, err = hcn.DecodePortMapping(doc.Policy.Settings); err != nil {
					t.Fatal(err)
				}
			}
			if got != doc.Want {
				t.Fatalf("decoded %+v, want %+v", got, doc.Want)
			}
			if doc.Policy.Type != "PortMapping" {
				return
			}
			// an endpoint of ours HNS reads back with this policy matches
			// the request it came from: kept, no HNS call
			sim, mgr := setup(func() *hcnsim.Sim { return hcnsim.New() }, true)
			netID, err := mgr.EnsureNetwork(ctx)
			if err != nil {
				t.Fatal(err)
			}
			ns := sim.CreateNamespace("")
			back := hcn.Endpoint{ID: "E1", Name: mgr.EndpointName("sb1"), NetworkID: netID, Namespace: ns, PortMappings: []hcn.PortMappingPolicy{got},
				Routes: []hcn.Route{{DestinationPrefix: "0.0.0.0/0", NextHop: "172.30.0.1", Metric: 5000}}}
			target, err := mgr.Target(ctx)
			if err != nil {
				t.Fatal(err)
			}
			steps := hcn.Diff(target.Spec(hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: []hcn.PortMappingPolicy{doc.Want}}), ns, []hcn.Endpoint{back}, target.RoutesStored)
			if len(steps) != 1 || steps[0].Kind != hcn.StepKeep || steps[0].Endpoint.ID != "E1" {
				t.Fatalf("plan %v: the read-back is rebuilt", steps)
			}
		})
	}
}

// b2 is the "policy" object of a read-back document: the v1 NAT policy's
// fields are its own.
func b2(t *testing.T, doc []byte) json.RawMessage {
	t.Helper()
	var d struct{ Policy json.RawMessage }
	if err := json.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	return d.Policy
}

// The decoder reads every form a read-back may take, and says why when it
// cannot (the adapter keeps that as Undecoded, never dropping a policy).
func TestDecodePortMapping(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want hcn.PortMappingPolicy
		err  string
	}{
		{`{"Protocol":17,"InternalPort":53,"ExternalPort":5353,"Flags":1}`, hcn.PortMappingPolicy{Protocol: hcn.UDP, InternalPort: 53, ExternalPort: 5353, Flags: 1}, ""},
		{`{"Protocol":"udp","InternalPort":"53","ExternalPort":"5353","Flags":"None"}`, hcn.PortMappingPolicy{Protocol: hcn.UDP, InternalPort: 53, ExternalPort: 5353}, ""},
		{`{"Protocol":"6","InternalPort":80,"ExternalPort":8080,"Flags":"LocalRoutedVip|IPv6"}`, hcn.PortMappingPolicy{Protocol: hcn.TCP, InternalPort: 80, ExternalPort: 8080, Flags: 3}, ""},
		{`{"Protocol":6,"InternalPort":80,"ExternalPort":8080,"Flags":"3"}`, hcn.PortMappingPolicy{Protocol: hcn.TCP, InternalPort: 80, ExternalPort: 8080, Flags: 3}, ""},
		{`{"Protocol":6,"InternalPort":80,"ExternalPort":70000}`, hcn.PortMappingPolicy{}, "ExternalPort"},
		{`{"Protocol":"SCTP","InternalPort":80,"ExternalPort":8080}`, hcn.PortMappingPolicy{}, "Protocol"},
		{`{"Protocol":6,"InternalPort":80,"ExternalPort":8080,"Flags":"Hairpin"}`, hcn.PortMappingPolicy{}, "no NAT flag"},
		{`[1,2]`, hcn.PortMappingPolicy{}, "PortMapping settings"},
	} {
		got, err := hcn.DecodePortMapping(json.RawMessage(tc.in))
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("%s: %+v, %v; want %+v", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), tc.in)):
			t.Errorf("%s: %v; want an error naming the settings and %q", tc.in, err, tc.err)
		}
	}
	// an endpoint with a policy HNS wrote in a form not decoded matches
	// while the count agrees (a rebuild would read back the same), and not
	// when it does not
	sim, mgr := setup(func() *hcnsim.Sim { return hcnsim.New() }, true)
	netID, _ := mgr.EnsureNetwork(ctx)
	ns := sim.CreateNamespace("")
	two := []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 8080, InternalPort: 80, Flags: 1}, {Protocol: hcn.UDP, ExternalPort: 5353, InternalPort: 53, Flags: 1}}
	route := []hcn.Route{{DestinationPrefix: "0.0.0.0/0", NextHop: "172.30.0.1", Metric: 5000}}
	for _, tc := range []struct {
		decoded   []hcn.PortMappingPolicy
		undecoded int
		kept      bool
	}{{two[:1], 1, true}, {two[:1], 0, false}, {two[:1], 2, false}, {[]hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 9999, InternalPort: 80, Flags: 1}}, 1, false}} {
		back := hcn.Endpoint{ID: "E1", Name: mgr.EndpointName("sb1"), NetworkID: netID, Namespace: ns, PortMappings: tc.decoded, Routes: route}
		for range tc.undecoded {
			back.Undecoded = append(back.Undecoded, `PortMapping settings {"Protocol":"?"}`)
		}
		target, err := mgr.Target(ctx)
		if err != nil {
			t.Fatal(err)
		}
		steps := hcn.Diff(target.Spec(hcn.Desired{SandboxID: "sb1", Namespace: ns, Policies: two}), ns, []hcn.Endpoint{back}, target.RoutesStored)
		if kept := len(steps) == 1 && steps[0].Kind == hcn.StepKeep; kept != tc.kept {
			t.Errorf("decoded %v + %d undecoded: plan %v; kept %v wanted", tc.decoded, tc.undecoded, steps, tc.kept)
		}
	}
}

// A v1 NAT policy (a CNI's endpoint made through the v1 API) is read with
// its protocol as HNS names it, and without one as TCP, HNS v1's default:
// the CNI's TCP mapping must be recognised as the CNI's.
func TestDecodeV1NAT(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want hcn.PortMappingPolicy
		ok   bool
	}{
		{`{"InternalPort":80,"ExternalPort":8080}`, hcn.PortMappingPolicy{Protocol: hcn.TCP, InternalPort: 80, ExternalPort: 8080}, true},
		{`{"Protocol":"TCP","InternalPort":80,"ExternalPort":8080}`, hcn.PortMappingPolicy{Protocol: hcn.TCP, InternalPort: 80, ExternalPort: 8080}, true},
		{`{"Protocol":"udp","InternalPort":53,"ExternalPort":5353}`, hcn.PortMappingPolicy{Protocol: hcn.UDP, InternalPort: 53, ExternalPort: 5353}, true},
		{`{"Protocol":17,"InternalPort":"53","ExternalPort":"5353","VIP":"10.0.0.4"}`, hcn.PortMappingPolicy{Protocol: hcn.UDP, InternalPort: 53, ExternalPort: 5353, VIP: "10.0.0.4"}, true},
		{`{"Protocol":"TCP","InternalPort":80}`, hcn.PortMappingPolicy{}, false}, // no host port: not a port mapping
		{`"NAT"`, hcn.PortMappingPolicy{}, false},
	} {
		got, ok := hcn.DecodeV1NAT(json.RawMessage(tc.in))
		if ok != tc.ok || got != tc.want {
			t.Errorf("%s: %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
