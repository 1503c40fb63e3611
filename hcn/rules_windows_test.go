//go:build windows

package hcn_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	hcsshim "github.com/Microsoft/hcsshim/hcn"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
)

// TestWhatThisHNSDoes reports what this HNS does where the simulator and
// the emulator model a rule nobody has verified (docs/real-node.md,
// "Evidence"): on a real HNS (the Windows workflow) each is a line of the
// report, never a failure, and says whether the simulator's default
// variant agrees; against the emulator (make test-windows) each must be
// what the emulator's rule variant says, so the test can fail.
func TestWhatThisHNSDoes(t *testing.T) {
	for _, rules := range hnsRules(t) {
		t.Run(rules.String(), func(t *testing.T) { whatThisHNSDoes(t, rules) })
	}
}

func whatThisHNSDoes(t *testing.T, rules hcnsim.Rules) {
	useRules(t, rules)
	bg := context.Background()
	svc, err := hcn.NewWindowsService(bg, hcn.NewLimiter(4))
	if err != nil {
		t.Fatal(err)
	}
	subnet := clearOfTheNode(t, svc)
	n, err := svc.CreateNetwork(bg, hcn.NetworkSpec{Name: fmt.Sprintf("hcnpm-rules-%d", time.Now().UnixNano()), Type: hcn.NetworkNAT,
		Subnet: subnet.String(), Gateway: subnet.Addr().Next().String()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if hn, err := hcsshim.GetNetworkByID(n.ID); err == nil {
			_ = hn.Delete()
		}
	})
	create := func(spec hcn.EndpointSpec) *hcn.Endpoint {
		t.Helper()
		spec.Name, spec.NetworkID = fmt.Sprintf("hcnpm-rule-%d", time.Now().UnixNano()), n.ID
		ep, err := svc.CreateEndpoint(bg, spec)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = svc.DeleteEndpoint(bg, ep.ID) })
		back, err := svc.GetEndpoint(bg, ep.ID)
		if err != nil {
			t.Fatal(err)
		}
		return back
	}

	// DNS on an endpoint created without any (hcsshim#2369: filled in)
	back := create(hcn.EndpointSpec{})
	filled := len(back.DNS.ServerList) > 0
	observe(t, "DNS of an endpoint created without any", fmt.Sprintf("read back as %s", back.DNS), filled == !rules.NoDNSFill)

	// an endpoint's routes: stored, or dropped (builds before endpoint routes)
	routes := []hcn.Route{{DestinationPrefix: "0.0.0.0/0", NextHop: n.Gateway, Metric: 5000}}
	back = create(hcn.EndpointSpec{Routes: routes})
	observe(t, "an endpoint's routes", fmt.Sprintf("sent %v, read back %v", routes, back.Routes), (len(back.Routes) == 0) == rules.DropRoutes)

	// a PortMapping policy's read-back form: numbers, or names
	back = create(hcn.EndpointSpec{PortMappings: []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 18089, InternalPort: 80, Flags: 1}}})
	raw, _ := hcsshim.GetEndpointByID(back.ID)
	settings := ""
	if raw != nil {
		for _, p := range raw.Policies {
			if p.Type == hcsshim.PortMapping {
				settings = string(p.Settings)
			}
		}
	}
	observe(t, "a PortMapping policy read back", fmt.Sprintf("settings %s, decoded %v, undecoded %v", settings, back.PortMappings, back.Undecoded),
		len(back.PortMappings) == 1 && back.PortMappings[0].Flags == 1 && strings.Contains(settings, `"Flags":"`) == rules.EnumsAsNames)

	// delete while attached: refused (HCN_E_ENTITY_HAS_REFERENCES), or done
	ns, err := (&hcsshim.HostComputeNamespace{}).Create()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ns.Delete() })
	ep := create(hcn.EndpointSpec{})
	if err := svc.AddNamespaceEndpoint(bg, hcn.ParseGUID(ns.Id), ep.ID); err != nil {
		t.Fatal(err)
	}
	derr := svc.DeleteEndpoint(bg, ep.ID)
	what := "refused: " + fmt.Sprint(derr)
	if derr == nil {
		what = "deleted"
	}
	observe(t, "delete of an endpoint still attached", what, (derr == nil) == rules.DeleteAttached)
	_ = svc.RemoveNamespaceEndpoint(bg, hcn.ParseGUID(ns.Id), ep.ID)

	// a NAT network without a subnet: HNS places it, or refuses
	nn, err := svc.CreateNetwork(bg, hcn.NetworkSpec{Name: fmt.Sprintf("hcnpm-rules-nosubnet-%d", time.Now().UnixNano()), Type: hcn.NetworkNAT})
	if err == nil {
		if hn, err := hcsshim.GetNetworkByID(nn.ID); err == nil {
			_ = hn.Delete()
		}
		observe(t, "a NAT network created without a subnet", fmt.Sprintf("created with %v gateway %q", nn.Subnets, nn.Gateway), !rules.NATNeedsSubnet)
	} else {
		observe(t, "a NAT network created without a subnet", "refused: "+err.Error(), rules.NATNeedsSubnet || rules.SecondNATRefused)
	}
}

// clearOfTheNode is a /24 of 172.31.0.0/16 that overlaps no HNS network and
// no address of the host.
func clearOfTheNode(t *testing.T, svc hcn.Service) netip.Prefix {
	t.Helper()
	nets, err := svc.ListNetworks(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var taken []netip.Prefix
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				taken = append(taken, p.Masked())
			}
		}
	}
	for _, nw := range nets {
		for _, s := range nw.Subnets {
			if p, err := netip.ParsePrefix(s); err == nil {
				taken = append(taken, p)
			}
		}
	}
	for i := 200; i < 250; i++ {
		if p := netip.MustParsePrefix(fmt.Sprintf("172.31.%d.0/24", i)); !slices.ContainsFunc(taken, p.Overlaps) {
			return p
		}
	}
	t.Fatalf("no /24 of 172.31.200.0-172.31.249.0 is clear of %v", taken)
	return netip.Prefix{}
}
