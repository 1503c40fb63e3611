package hcnsim

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

var ctx = context.Background()

func newNet(t *testing.T, s hcn.Service) string {
	t.Helper()
	n, err := s.CreateNetwork(ctx, hcn.NetworkSpec{Name: "nat", Type: hcn.NetworkNAT, Subnet: "172.30.0.0/24", Gateway: "172.30.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	return n.ID
}

func pol(port uint16, vip string, flags hcn.NatFlags) hcn.PortMappingPolicy {
	return hcn.PortMappingPolicy{Protocol: hcn.TCP, ExternalPort: port, InternalPort: 80, VIP: vip, Flags: flags}
}

// simulators returns the in-process simulator and a client of the same
// simulator served over its wire (testAddress): both must behave alike.
func simulators(t *testing.T) map[string]func(t *testing.T) (hcn.Service, *Sim) {
	return map[string]func(t *testing.T) (hcn.Service, *Sim){
		"direct": func(t *testing.T) (hcn.Service, *Sim) { s := New(); return s, s },
		"wire": func(t *testing.T) (hcn.Service, *Sim) {
			s := New()
			addr := testAddress(t)
			l, err := Listen(addr)
			if err != nil {
				t.Fatal(err)
			}
			if l.Addr().Network() == "tcp" {
				addr = "tcp://" + l.Addr().String() // the port picked
			}
			srv := httptest.NewUnstartedServer(Handler(s))
			srv.Listener = l
			srv.Start()
			t.Cleanup(srv.Close)
			c, err := NewClient(addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			return c, s
		},
	}
}

func TestSimulatorSemantics(t *testing.T) {
	for name, mk := range simulators(t) {
		t.Run(name, func(t *testing.T) {
			svc, sim := mk(t)
			netID := newNet(t, svc)
			ns := sim.CreateNamespace("")

			if _, err := svc.GetNetworkByName(ctx, "missing"); !errors.Is(err, hcn.ErrNotFound) {
				t.Errorf("missing network: %v, want ErrNotFound", err)
			}
			if _, err := svc.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "x", NetworkID: "nope"}); !errors.Is(err, hcn.ErrNotFound) {
				t.Errorf("endpoint on missing network: %v, want ErrNotFound", err)
			}
			if _, err := svc.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "x", NetworkID: netID, Namespace: ns}); !errors.Is(err, hcn.ErrInvalid) {
				t.Errorf("namespace preset on create: %v, want ErrInvalid", err)
			}
			a, err := svc.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "a", NetworkID: netID, PortMappings: []hcn.PortMappingPolicy{pol(8080, "", 1)}})
			if err != nil {
				t.Fatal(err)
			}
			if a.IPAddress != "172.30.0.2" {
				t.Errorf("endpoint address %q, want the first free address of the subnet after the gateway, 172.30.0.2", a.IPAddress)
			}
			// port conflicts across endpoints: wildcard vs specific, same family
			for _, p := range []hcn.PortMappingPolicy{pol(8080, "", 0), pol(8080, "172.30.0.9", 1)} {
				if _, err := svc.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "b", NetworkID: netID, PortMappings: []hcn.PortMappingPolicy{p}}); !errors.Is(err, hcn.ErrPortInUse) {
					t.Errorf("policy %v over a held port: %v, want ErrPortInUse", p, err)
				}
			}
			// other family, other protocol, other port: fine
			for _, p := range []hcn.PortMappingPolicy{pol(8080, "", 3), {Protocol: hcn.UDP, ExternalPort: 8080, InternalPort: 80}, pol(8081, "", 1)} {
				if _, err := svc.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "c", NetworkID: netID, PortMappings: []hcn.PortMappingPolicy{p}}); err != nil {
					t.Errorf("policy %v: %v", p, err)
				}
			}
			for _, p := range []hcn.PortMappingPolicy{{Protocol: 132, ExternalPort: 1, InternalPort: 1}, pol(0, "", 0), pol(9, "fd00::1", 0), pol(9, "bad", 0)} {
				if _, err := svc.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "d", NetworkID: netID, PortMappings: []hcn.PortMappingPolicy{p}}); !errors.Is(err, hcn.ErrInvalid) {
					t.Errorf("policy %v: %v, want ErrInvalid", p, err)
				}
			}
			// attach rules
			if err := svc.AddNamespaceEndpoint(ctx, "no-such-ns", a.ID); !errors.Is(err, hcn.ErrNotFound) {
				t.Errorf("attach to missing namespace: %v", err)
			}
			if err := svc.AddNamespaceEndpoint(ctx, ns, "no-such-ep"); !errors.Is(err, hcn.ErrNotFound) {
				t.Errorf("attach missing endpoint: %v", err)
			}
			if err := svc.AddNamespaceEndpoint(ctx, ns, a.ID); err != nil {
				t.Fatal(err)
			}
			if err := svc.AddNamespaceEndpoint(ctx, ns, a.ID); !errors.Is(err, hcn.ErrAlreadyAttached) {
				t.Errorf("second attach: %v, want ErrAlreadyAttached", err)
			}
			if err := svc.DeleteEndpoint(ctx, a.ID); !errors.Is(err, hcn.ErrInUse) {
				t.Errorf("delete attached endpoint: %v, want ErrInUse", err)
			}
			got, err := svc.GetNamespace(ctx, ns)
			if err != nil || len(got.Endpoints) != 1 || got.Endpoints[0] != a.ID {
				t.Errorf("namespace = %+v, %v; want endpoint %s in it", got, err, a.ID)
			}
			if err := svc.RemoveNamespaceEndpoint(ctx, ns, a.ID); err != nil {
				t.Fatal(err)
			}
			if err := svc.RemoveNamespaceEndpoint(ctx, ns, a.ID); !errors.Is(err, hcn.ErrNotFound) {
				t.Errorf("second detach: %v, want ErrNotFound", err)
			}
			if err := svc.DeleteEndpoint(ctx, a.ID); err != nil {
				t.Fatal(err)
			}
			if err := svc.DeleteEndpoint(ctx, a.ID); !errors.Is(err, hcn.ErrNotFound) {
				t.Errorf("second delete: %v, want ErrNotFound", err)
			}
			// the port is free again
			if _, err := svc.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "e", NetworkID: netID, PortMappings: []hcn.PortMappingPolicy{pol(8080, "", 1)}}); err != nil {
				t.Errorf("port not released by delete: %v", err)
			}
			// duplicate names are allowed, as in HNS
			for range 2 {
				if _, err := svc.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "dup", NetworkID: netID}); err != nil {
					t.Fatal(err)
				}
			}
			if eps, err := svc.ListEndpointsByName(ctx, "dup"); err != nil || len(eps) != 2 {
				t.Errorf("ListEndpointsByName(dup) = %d endpoints, %v; want 2", len(eps), err)
			}
		})
	}
}

func TestDeleteNamespaceDetachesEndpoints(t *testing.T) {
	s := New()
	netID := newNet(t, s)
	ns := s.CreateNamespace("")
	ep, _ := s.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "a", NetworkID: netID})
	if err := s.AddNamespaceEndpoint(ctx, ns, ep.ID); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteNamespace(ns); err != nil {
		t.Fatal(err)
	}
	st := s.State()
	if len(st.Endpoints) != 1 || st.Endpoints[0].Namespace != "" {
		t.Errorf("endpoint after namespace deletion: %+v, want kept and detached", st.Endpoints)
	}
	if err := s.DeleteEndpoint(ctx, ep.ID); err != nil {
		t.Errorf("delete detached endpoint: %v", err)
	}
}

func TestFaults(t *testing.T) {
	for name, mk := range simulators(t) {
		t.Run(name, func(t *testing.T) {
			svc, sim := mk(t)
			netID := newNet(t, svc)
			for _, k := range Kinds() {
				if err := sim.InjectFault(Fault{Op: OpCreateEndpoint, Kind: k}); err != nil {
					t.Fatal(err)
				}
				_, err := svc.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "f", NetworkID: netID})
				if want, _ := hcn.Named(k); err == nil || !errors.Is(err, want) || hcn.NameOf(err) != k {
					t.Errorf("fault %s: got %v", k, err)
				}
			}
			if n := len(sim.State().Endpoints); n != 0 {
				t.Errorf("%d endpoints created by failing calls", n)
			}
			// an "after" fault applies the call and still fails it
			if err := sim.InjectFault(Fault{Op: OpCreateEndpoint, Kind: "internal", After: true}); err != nil {
				t.Fatal(err)
			}
			if _, err := svc.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "late", NetworkID: netID}); err == nil {
				t.Error("after-fault: want an error")
			}
			if n := len(sim.State().Endpoints); n != 1 {
				t.Errorf("after-fault: %d endpoints, want the one created", n)
			}
			if err := sim.InjectFault(Fault{Op: "Bogus", Kind: "internal"}); err == nil {
				t.Error("unknown op accepted")
			}
			if err := sim.InjectFault(Fault{Op: OpCreateEndpoint, Kind: "bogus"}); err == nil {
				t.Error("unknown kind accepted")
			}
		})
	}
}

func TestClientReportsUnreachableSimulator(t *testing.T) {
	c, err := NewClient("unix:///nonexistent/dir/s.sock")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListEndpoints(ctx); !errors.Is(err, hcn.ErrUnavailable) {
		t.Errorf("unreachable simulator: %v, want ErrUnavailable", err)
	}
	if _, err := NewClient("http://x"); err == nil {
		t.Error("bad scheme accepted")
	}
}

func TestHandlerRejectsBadJSON(t *testing.T) {
	srv := httptest.NewServer(Handler(New()))
	defer srv.Close()
	res, err := http.Post(srv.URL+"/v1/"+OpCreateEndpoint, "application/json", stringsReader("{nope"))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var body struct{ Error *wireError }
	if err := jsonDecode(res, &body); err != nil || body.Error == nil || body.Error.Kind != "invalid" {
		t.Errorf("bad JSON answered %+v, %v; want kind invalid", body.Error, err)
	}
}

func TestSerializedRunsOneCallAtATime(t *testing.T) {
	s := New()
	s.SetSerialized(true)
	s.SetOpLatency(OpListEndpoints, time.Second)
	slowDone := make(chan struct{})
	go func() { _, _ = s.ListEndpoints(context.Background()); close(slowDone) }()
	for s.Calls()[OpListEndpoints] == 0 { // counted once it holds HNS
		time.Sleep(time.Millisecond)
	}
	_, _ = s.GetNamespace(context.Background(), "x") // no latency of its own: waits for the slow call
	// serialized, the slow call is over by now (its goroutine only has to
	// return); in parallel it would still have most of its second to go
	select {
	case <-slowDone:
	case <-time.After(200 * time.Millisecond):
		t.Fatalf("the second call finished while the first was still running: HNS ran them in parallel")
	}
}

// An error says its kind once, directly and over the wire ("not found",
// not "not found: not found").
func TestErrorTextOverTheWire(t *testing.T) {
	for name, mk := range simulators(t) {
		t.Run(name, func(t *testing.T) {
			svc, _ := mk(t)
			_, err := svc.GetNetworkByName(context.Background(), "nat")
			if err == nil || err.Error() != `network "nat": not found` || !errors.Is(err, hcn.ErrNotFound) {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

// Issue 10, item 5: an HNS restart drops every endpoint (the ports are
// free again) but keeps networks and namespaces.
func TestRestartHNS(t *testing.T) {
	s := New()
	netID := newNet(t, s)
	ns := s.CreateNamespace("")
	ep, err := s.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "a", NetworkID: netID, PortMappings: []hcn.PortMappingPolicy{pol(8080, "", 0)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.AddNamespaceEndpoint(ctx, ns, ep.ID); err != nil {
		t.Fatal(err)
	}
	s.RestartHNS()
	st := s.State()
	if len(st.Endpoints) != 0 || len(st.Networks) != 1 || len(st.Namespaces) != 1 || len(st.Namespaces[0].Endpoints) != 0 {
		t.Fatalf("after a restart: %+v", st)
	}
	if err := s.DeleteEndpoint(ctx, ep.ID); !errors.Is(err, hcn.ErrNotFound) {
		t.Errorf("delete of a lost endpoint: %v, want ErrNotFound", err)
	}
	if _, err := s.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "b", NetworkID: netID, PortMappings: []hcn.PortMappingPolicy{pol(8080, "", 0)}}); err != nil {
		t.Errorf("the lost endpoint's port is still held: %v", err)
	}
}

// A reboot can leave an endpoint that names a namespace which is gone and
// still holds its ports; detaching it fails, deleting it works.
func TestStaleEndpoint(t *testing.T) {
	s := New()
	netID := newNet(t, s)
	gone := hcn.GUID("5A7E0000-0000-4000-8000-00000000B007")
	ep, err := s.AddStaleEndpoint(hcn.EndpointSpec{Name: "stale", NetworkID: netID, PortMappings: []hcn.PortMappingPolicy{pol(8080, "", 0)}}, gone)
	if err != nil || ep.Namespace != gone {
		t.Fatalf("AddStaleEndpoint = %+v, %v", ep, err)
	}
	if _, err := s.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "new", NetworkID: netID, PortMappings: []hcn.PortMappingPolicy{pol(8080, "", 0)}}); !errors.Is(err, hcn.ErrPortInUse) {
		t.Errorf("the stale endpoint's port: %v, want ErrPortInUse", err)
	}
	if err := s.RemoveNamespaceEndpoint(ctx, gone, ep.ID); !errors.Is(err, hcn.ErrNotFound) {
		t.Errorf("detach from the gone namespace: %v, want ErrNotFound", err)
	}
	if err := s.DeleteEndpoint(ctx, ep.ID); err != nil {
		t.Errorf("delete of the stale endpoint: %v; HNS deletes an endpoint whose namespace is gone (Azure CNI PR 1272)", err)
	}
	if _, err := s.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "new", NetworkID: netID, PortMappings: []hcn.PortMappingPolicy{pol(8080, "", 0)}}); err != nil {
		t.Errorf("the port after the stale endpoint went: %v", err)
	}
	live := s.CreateNamespace("")
	if _, err := s.AddStaleEndpoint(hcn.EndpointSpec{Name: "x", NetworkID: netID}, live); !errors.Is(err, hcn.ErrInvalid) {
		t.Errorf("a stale endpoint in a live namespace: %v, want ErrInvalid", err)
	}
}

// TestRules: each variant of the unverified HNS rules does what it says,
// directly and over the wire (SetRules travels too).
func TestRules(t *testing.T) {
	for name, mk := range simulators(t) {
		t.Run(name, func(t *testing.T) {
			for _, r := range AllRules() {
				t.Run(r.String(), func(t *testing.T) {
					svc, sim := mk(t)
					if c, ok := svc.(*Client); ok {
						if err := c.SetRules(ctx, r); err != nil {
							t.Fatal(err)
						}
					} else {
						sim.SetRules(r)
					}
					if sim.Rules() != r {
						t.Fatalf("rules in force %v, want %v", sim.Rules(), r)
					}
					netID := newNet(t, svc)
					ns := sim.CreateNamespace("")
					a, _ := svc.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "ep-a", NetworkID: netID})
					if err := svc.AddNamespaceEndpoint(ctx, ns, a.ID); err != nil {
						t.Fatal(err)
					}
					err := svc.DeleteEndpoint(ctx, a.ID)
					if r.DeleteAttached != (err == nil) || !r.DeleteAttached && !errors.Is(err, hcn.ErrInUse) {
						t.Errorf("delete of an attached endpoint: %v", err)
					}
					if got, _ := svc.GetNamespace(ctx, ns); r.DeleteAttached && len(got.Endpoints) != 0 {
						t.Errorf("a deleted endpoint is still in its namespace: %+v", got)
					}
					b, _ := svc.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "ep-b", NetworkID: netID})
					if err := svc.AddNamespaceEndpoint(ctx, ns, b.ID); err != nil {
						t.Fatal(err)
					}
					if err := sim.DeleteNamespace(ns); err != nil {
						t.Fatal(err)
					}
					got, _ := svc.ListEndpointsByName(ctx, "ep-b")
					if want := map[bool]hcn.GUID{true: ns, false: ""}[r.StaleNamespace]; len(got) != 1 || got[0].Namespace != want {
						t.Errorf("after the namespace's deletion: %+v, want namespace %q", got, want)
					}
					if err := svc.DeleteEndpoint(ctx, b.ID); err != nil {
						t.Errorf("an endpoint whose namespace is gone must be deletable: %v", err)
					}
					folded, _ := svc.ListEndpointsByName(ctx, "EP-A")
					if wantN := map[bool]int{true: 1, false: 0}[r.NameFold && !r.DeleteAttached]; len(folded) != wantN {
						t.Errorf("name filter EP-A found %+v, want %d", folded, wantN)
					}
				})
			}
		})
	}
}

// TestImplicitRouteAndNamespaceView: an endpoint created without routes
// gets HNS's default route via its gateway; one with routes gets exactly
// those (a 0.0.0.0 next hop only suppresses the implicit one); the
// namespace shows both endpoints' routes and DNS servers. A NAT network
// created without a subnet gets one and a gateway, as HNS picks them.
func TestImplicitRouteAndNamespaceView(t *testing.T) {
	s := New()
	nat, err := s.CreateNetwork(ctx, hcn.NetworkSpec{Name: "nat", Type: hcn.NetworkNAT})
	if err != nil || nat.Gateway == "" || len(nat.Subnets) != 1 {
		t.Fatalf("NAT network without a subnet = %+v, %v; want HNS's subnet and gateway", nat, err)
	}
	ns := s.CreateNamespace("")
	plain, _ := s.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "plain", NetworkID: nat.ID, DNS: hcn.DNS{ServerList: []string{"10.0.0.10"}}})
	none, _ := s.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "none", NetworkID: nat.ID,
		Routes: []hcn.Route{{DestinationPrefix: "0.0.0.0/0", NextHop: "0.0.0.0"}, {DestinationPrefix: "10.9.0.0/16", NextHop: nat.Gateway, Metric: 7}}})
	for _, ep := range []*hcn.Endpoint{plain, none} {
		if err := s.AddNamespaceEndpoint(ctx, ns, ep.ID); err != nil {
			t.Fatal(err)
		}
	}
	var view Namespace
	for _, n := range s.State().Namespaces {
		if n.ID == ns {
			view = n
		}
	}
	want := []hcn.Route{{DestinationPrefix: "0.0.0.0/0", NextHop: nat.Gateway, Metric: ImplicitRouteMetric}, {DestinationPrefix: "10.9.0.0/16", NextHop: nat.Gateway, Metric: 7}}
	// the endpoint without DNS servers got the node's (HNS fills them in)
	dns := slices.Sorted(slices.Values(view.DNSServers)) // in endpoint order: by their random IDs
	if !hcn.SameRoutes(view.Routes, want) || !slices.Equal(dns, slices.Sorted(slices.Values(append([]string{"10.0.0.10"}, HostDNS().ServerList...)))) {
		t.Errorf("namespace view = routes %v DNS %v; want %v and the DNS servers of both", view.Routes, view.DNSServers, want)
	}
	if d := view.DefaultRoutes(); len(d) != 1 || d[0].NextHop != nat.Gateway {
		t.Errorf("default routes %v", d)
	}
	if _, err := s.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "bad", NetworkID: nat.ID, Routes: []hcn.Route{{DestinationPrefix: "default", NextHop: "x"}}}); !errors.Is(err, hcn.ErrInvalid) {
		t.Errorf("a malformed route: %v, want ErrInvalid", err)
	}
}

// A namespace GUID is one GUID however it is spelled: lower case (as the
// OCI spec carries it), braces, any mix; real HNS takes any spelling.
func TestNamespaceGUIDsInAnySpelling(t *testing.T) {
	for name, mk := range simulators(t) {
		t.Run(name, func(t *testing.T) {
			svc, s := mk(t)
			netID := newNet(t, svc)
			id := s.CreateNamespace("")
			for _, spelled := range []hcn.GUID{hcn.GUID(strings.ToLower(string(id))), hcn.GUID("{" + string(id) + "}")} {
				ep, err := svc.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "e-" + string(spelled), NetworkID: netID})
				if err != nil {
					t.Fatal(err)
				}
				if err := svc.AddNamespaceEndpoint(ctx, spelled, ep.ID); err != nil {
					t.Fatalf("attach to %s: %v", spelled, err)
				}
				if ns, err := svc.GetNamespace(ctx, spelled); err != nil || !slices.Contains(ns.Endpoints, ep.ID) {
					t.Fatalf("GetNamespace(%s) = %+v, %v", spelled, ns, err)
				}
				if err := svc.RemoveNamespaceEndpoint(ctx, spelled, ep.ID); err != nil {
					t.Fatalf("detach from %s: %v", spelled, err)
				}
			}
			if err := s.DeleteNamespace(hcn.GUID(strings.ToLower(string(id)))); err != nil {
				t.Fatalf("delete: %v", err)
			}
		})
	}
}
