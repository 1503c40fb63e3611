package hcn

import (
	"os"
	"strings"
	"testing"
)

func TestSamePoliciesIgnoresOrder(t *testing.T) {
	a := []PortMappingPolicy{{Protocol: TCP, ExternalPort: 1, InternalPort: 1}, {Protocol: UDP, ExternalPort: 2, InternalPort: 2}}
	b := []PortMappingPolicy{a[1], a[0]}
	if !SamePolicies(a, b) {
		t.Error("same policies in another order should compare equal")
	}
	c := []PortMappingPolicy{a[0], {Protocol: UDP, ExternalPort: 2, InternalPort: 3}}
	if SamePolicies(a, c) || SamePolicies(a, a[:1]) {
		t.Error("different policies compare equal")
	}
}

func TestProvidedBy(t *testing.T) {
	cni := []Endpoint{
		{ID: "a", PortMappings: []PortMappingPolicy{{Protocol: UDP, ExternalPort: 53, InternalPort: 53}}},
		{ID: "b", PortMappings: []PortMappingPolicy{
			{Protocol: TCP, ExternalPort: 8080, InternalPort: 80},
			{Protocol: TCP, ExternalPort: 8443, InternalPort: 443, VIP: "10.0.0.4"},
			{Protocol: TCP, ExternalPort: 9090, InternalPort: 90, VIP: "FD00::4", Flags: NatFlagsIPv6},
		}},
	}
	tests := []struct {
		name string
		p    PortMappingPolicy
		want string // provider's ID, "" for none
	}{
		{"same protocol and host port, every address", PortMappingPolicy{Protocol: TCP, ExternalPort: 8080, InternalPort: 80, Flags: NatFlagsLocalRoutedVip}, "b"},
		{"unspecified address is every address", PortMappingPolicy{Protocol: TCP, ExternalPort: 8080, InternalPort: 80, VIP: "0.0.0.0"}, "b"},
		{"other protocol", PortMappingPolicy{Protocol: UDP, ExternalPort: 8080, InternalPort: 80}, ""},
		{"other host port", PortMappingPolicy{Protocol: TCP, ExternalPort: 8081, InternalPort: 80}, ""},
		{"same host IP", PortMappingPolicy{Protocol: TCP, ExternalPort: 8443, InternalPort: 443, VIP: "10.0.0.4"}, "b"},
		{"other host IP", PortMappingPolicy{Protocol: TCP, ExternalPort: 8443, InternalPort: 443, VIP: "10.0.0.5"}, ""},
		{"IPv6 spelled differently", PortMappingPolicy{Protocol: TCP, ExternalPort: 9090, InternalPort: 90, VIP: "fd00:0::4", Flags: NatFlagsIPv6}, "b"},
		{"other family", PortMappingPolicy{Protocol: TCP, ExternalPort: 8080, InternalPort: 80, Flags: NatFlagsIPv6}, ""},
		{"first endpoint", PortMappingPolicy{Protocol: UDP, ExternalPort: 53, InternalPort: 53}, "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ProvidedBy(tt.p, cni)
			if (got == nil) != (tt.want == "") || (got != nil && got.Endpoint.ID != tt.want) {
				t.Fatalf("ProvidedBy(%s) = %+v, want %q", tt.p, got, tt.want)
			}
		})
	}
}

// Carries says whether an endpoint's DNS holds the pod's: its resolvers
// (any order) and its search list (in order), and the suffix where the
// pod has one. An endpoint with the node's resolvers and the pod's search
// list does not (issue 47: it is reported as foreign DNS).
func TestDNSCarriesTheResolversAndTheSearchList(t *testing.T) {
	pod := DNS{ServerList: []string{"10.96.0.10", "10.96.0.11"}, Search: []string{"default.svc.cluster.local", "svc.cluster.local"},
		Domain: "default.svc.cluster.local"}
	for _, tc := range []struct {
		name string
		ep   DNS
		want bool
	}{
		{"the pod's own", pod, true},
		{"resolvers in another order", DNS{ServerList: []string{"10.96.0.11", "10.96.0.10"}, Search: pod.Search, Domain: pod.Domain}, true},
		{"the suffix in another case", DNS{ServerList: pod.ServerList, Search: pod.Search, Domain: "Default.SVC.cluster.local"}, true},
		{"the node's resolvers, the pod's search list", DNS{ServerList: []string{"168.63.129.16"}, Search: pod.Search, Domain: pod.Domain}, false},
		{"one resolver of two", DNS{ServerList: []string{"10.96.0.10"}, Search: pod.Search, Domain: pod.Domain}, false},
		{"a resolver more", DNS{ServerList: []string{"10.96.0.10", "10.96.0.11", "8.8.8.8"}, Search: pod.Search, Domain: pod.Domain}, false},
		{"the pod's resolvers, another search list", DNS{ServerList: pod.ServerList, Search: []string{"corp.example"}, Domain: pod.Domain}, false},
		{"search list in another order", DNS{ServerList: pod.ServerList, Search: []string{"svc.cluster.local", "default.svc.cluster.local"}, Domain: pod.Domain}, false},
		{"HNS's fill-in: the node's resolvers and suffix", DNS{ServerList: []string{"10.0.0.2"}, Domain: "corp.example"}, false},
		{"another suffix", DNS{ServerList: pod.ServerList, Search: pod.Search, Domain: "corp.example"}, false},
	} {
		if got := tc.ep.Carries(pod); got != tc.want {
			t.Errorf("%s: %+v.Carries(%+v) = %v, want %v", tc.name, tc.ep, pod, got, tc.want)
		}
	}
	if !(DNS{ServerList: []string{"10.0.0.2"}}).Carries(DNS{}) {
		t.Error("a pod whose DNS is not known is carried by any endpoint")
	}
}

// Issue 56: every CNI in docs/hostport.md's table is judged as its row
// says, from the shape of the endpoint that CNI builds (its source is the
// row's): whether its mapping is seen, whether it works, and whether the
// host IP was dropped. A row added to the table without one here fails.
func TestEveryCNIInTheHostPortTableIsJudgedAsItsRowSays(t *testing.T) {
	const hostIP = "10.0.0.4"
	asked := PortMappingPolicy{Protocol: TCP, ExternalPort: 9001, InternalPort: 80}
	onHostIP := asked
	onHostIP.VIP = hostIP
	v1NAT := func(vip string) Endpoint { // win-bridge apiVersion 1: a v1 NAT policy
		return Endpoint{ID: "cni", NATPolicies: []PortMappingPolicy{{Protocol: TCP, ExternalPort: 9001, InternalPort: 80, VIP: vip}}}
	}
	v2 := func(vip string, flags NatFlags) Endpoint {
		return Endpoint{ID: "cni", PortMappings: []PortMappingPolicy{{Protocol: TCP, ExternalPort: 9001, InternalPort: 80, VIP: vip, Flags: flags}}}
	}
	type want string
	const (
		ours       want = "the plugin maps it"
		cniWorks   want = "the CNI's, and works: skipped"
		cniDoesNot want = "the CNI's, and will not work: warned"
		cniDropped want = "the CNI's on every address: the host IP said dropped"
	)
	rows := []struct {
		cni     string // the table's first column
		network NetworkType
		ep      Endpoint
		p       PortMappingPolicy
		want    want
	}{
		{"win-bridge", NetworkL2Bridge, v1NAT(""), asked, cniDoesNot},
		{"win-bridge", NetworkL2Bridge, v2(hostIP, 0), onHostIP, cniDoesNot}, // apiVersion 2
		{"win-overlay", NetworkOverlay, Endpoint{ID: "cni"}, asked, ours},
		{"sdnbridge", NetworkL2Bridge, v2("", NatFlagsLocalRoutedVip), asked, cniWorks},
		{"sdnbridge", NetworkL2Bridge, v2("", 0), asked, cniDoesNot}, // without localRoutedPortMapping
		{"sdnoverlay", NetworkOverlay, v2("", 0), asked, cniWorks},
		{"Azure CNI", NetworkL2Bridge, v2(hostIP, NatFlagsLocalRoutedVip), onHostIP, cniWorks},
		{"Azure CNI", "L2Tunnel", v2("", NatFlagsLocalRoutedVip), asked, cniWorks},
		{"Calico for Windows", NetworkL2Bridge, Endpoint{ID: "cni"}, asked, ours},
		{"Calico for Windows", NetworkOverlay, Endpoint{ID: "cni"}, asked, ours},
		{"flannel host-gw", NetworkL2Bridge, v1NAT(""), asked, cniDoesNot},
		{"flannel vxlan", NetworkOverlay, Endpoint{ID: "cni"}, asked, ours},
		{"Antrea", "Transparent", Endpoint{ID: "cni"}, asked, ours},
		{"vpc-bridge (EKS)", NetworkL2Bridge, v2("", NatFlagsLocalRoutedVip), asked, cniWorks},
		{"vpc-bridge (EKS)", NetworkL2Bridge, v2("", NatFlagsLocalRoutedVip), onHostIP, cniDropped},
		{"GCE / GKE, containerd", NetworkL2Bridge, v2("", 0), asked, cniDoesNot},
		{"GCE / GKE, Docker", NetworkL2Bridge, v1NAT(""), asked, cniDoesNot},
	}
	tested := map[string]bool{}
	for _, r := range rows {
		tested[r.cni] = true
		pv := ProvidedBy(r.p, []Endpoint{r.ep})
		var got want
		switch {
		case pv == nil:
			got = ours
		case pv.Wider:
			got = cniDropped
			if ok, _, _ := pv.Effective(r.network); !ok {
				got = cniDoesNot
			}
		default:
			got = cniDoesNot
			if ok, why, fix := pv.Effective(r.network); ok {
				got = cniWorks
			} else if !strings.Contains(why, "cni") || fix == "" {
				t.Errorf("%s on %s: will not work, but says %q, fix %q: want the CNI's endpoint named and a fix", r.cni, r.network, why, fix)
			}
		}
		if got != r.want {
			t.Errorf("%s on %s, the pod asking %s of %+v: judged %q, want %q", r.cni, r.network, r.p, r.ep, got, r.want)
		}
	}
	doc, err := os.ReadFile("../docs/hostport.md")
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	in := false
	for _, line := range strings.Split(string(doc), "\n") {
		switch {
		case strings.HasPrefix(line, "| CNI | network |"):
			in = true
		case in && strings.HasPrefix(line, "|---"):
		case in && strings.HasPrefix(line, "| "):
			listed = append(listed, strings.TrimSpace(strings.Split(line, "|")[1]))
		default:
			in = false
		}
	}
	if len(listed) < 10 {
		t.Fatalf("docs/hostport.md's CNI table: read %d rows %v, want every CNI", len(listed), listed)
	}
	for _, cni := range listed {
		if !tested[cni] {
			t.Errorf("docs/hostport.md lists %q: no row of this test judges it", cni)
		}
		delete(tested, cni)
	}
	for cni := range tested {
		t.Errorf("this test judges %q, which docs/hostport.md's table does not list", cni)
	}
}

// Issue 56: a range is said as one: consecutive host ports onto
// consecutive container ports, same protocol, host IP and flags; IPv4
// and IPv6 runs apart (dual stack interleaves them); a gap, another
// container port or another host IP starts a new run.
func TestRunsSayARangeAsOne(t *testing.T) {
	var ps []PortMappingPolicy
	for port := uint16(10000); port < 10003; port++ {
		ps = append(ps, PortMappingPolicy{Protocol: UDP, ExternalPort: port, InternalPort: port, Flags: NatFlagsLocalRoutedVip},
			PortMappingPolicy{Protocol: UDP, ExternalPort: port, InternalPort: port, Flags: NatFlagsLocalRoutedVip | NatFlagsIPv6})
	}
	ps = append(ps,
		PortMappingPolicy{Protocol: UDP, ExternalPort: 10004, InternalPort: 10004, Flags: NatFlagsLocalRoutedVip}, // a gap
		PortMappingPolicy{Protocol: TCP, ExternalPort: 8080, InternalPort: 80},                                    // alone
		PortMappingPolicy{Protocol: TCP, ExternalPort: 8081, InternalPort: 90},                                    // another container port
		PortMappingPolicy{Protocol: TCP, ExternalPort: 8999, InternalPort: 8999},                                  // next to 10.0.0.4's run, on every address
		PortMappingPolicy{Protocol: TCP, ExternalPort: 9000, InternalPort: 9000, VIP: "10.0.0.4"},                 // a host IP
		PortMappingPolicy{Protocol: TCP, ExternalPort: 9001, InternalPort: 9001, VIP: "10.0.0.4"},
	)
	got := strings.Join(Runs(ps), ", ")
	want := "*:8080->80/tcp, *:8081->90/tcp, *:8999->8999/tcp, 10.0.0.4:9000-9001->9000-9001/tcp, *:10000-10002->10000-10002/udp, *:10004->10004/udp, [::]:10000-10002->10000-10002/udp"
	if got != want {
		t.Fatalf("Runs = %s\nwant   %s", got, want)
	}
}

// Two policies map the same thing when protocol, both ports, the address
// family and the host IP (in any spelling) agree, whatever their other
// flags; their keys are equal exactly then.
func TestAMappingsKeyIsWhatItMaps(t *testing.T) {
	p := PortMappingPolicy{Protocol: UDP, ExternalPort: 20000, InternalPort: 20000, VIP: "10.0.0.4", Flags: NatFlagsLocalRoutedVip}
	for _, tc := range []struct {
		name string
		q    PortMappingPolicy
		same bool
	}{
		{"the same", p, true},
		{"other flags", PortMappingPolicy{Protocol: UDP, ExternalPort: 20000, InternalPort: 20000, VIP: "10.0.0.4"}, true},
		{"an IPv4-mapped spelling", PortMappingPolicy{Protocol: UDP, ExternalPort: 20000, InternalPort: 20000, VIP: "::ffff:10.0.0.4"}, true},
		{"another protocol", PortMappingPolicy{Protocol: TCP, ExternalPort: 20000, InternalPort: 20000, VIP: "10.0.0.4"}, false},
		{"another host port", PortMappingPolicy{Protocol: UDP, ExternalPort: 20001, InternalPort: 20000, VIP: "10.0.0.4"}, false},
		{"another container port", PortMappingPolicy{Protocol: UDP, ExternalPort: 20000, InternalPort: 20001, VIP: "10.0.0.4"}, false},
		{"every address", PortMappingPolicy{Protocol: UDP, ExternalPort: 20000, InternalPort: 20000}, false},
		{"IPv6", PortMappingPolicy{Protocol: UDP, ExternalPort: 20000, InternalPort: 20000, VIP: "10.0.0.4", Flags: NatFlagsIPv6}, false},
	} {
		if got := SameMapping(p, tc.q); got != tc.same || Keys([]PortMappingPolicy{tc.q})[p.Key()] != tc.same {
			t.Errorf("%s: SameMapping = %v, want %v", tc.name, got, tc.same)
		}
	}
	if (PortMappingPolicy{VIP: "0.0.0.0"}).Key() != (PortMappingPolicy{}).Key() {
		t.Error("0.0.0.0 and no host IP are both every address")
	}
}
