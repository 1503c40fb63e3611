package request

import (
	"reflect"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// Issue 45: the DNS on the pod's endpoint comes from the record the plugin
// reads anyway: the pod's own (its CRI config), else what the CNI reported
// for its interface (the record's CNIResult, as go-cni writes it in
// containerd 1.7 and 2.x: one DNS entry per network, an empty one for
// loopback), and only where the record has neither must HNS be asked
// (NoDNS).
func TestResolveTakesTheDNSFromTheRecord(t *testing.T) {
	const dnsConfig = `,"dns_config":{"servers":["10.96.0.10"],"searches":["ns.svc.cluster.local","svc.cluster.local"],"options":["ndots:5"]}`
	const cniResult = `,"CNIResult":{"Interfaces":{"eth0":{"IPConfigs":[{"IP":"10.22.0.5","Gateway":"10.22.0.1"}],"Mac":"","Sandbox":"/var/run/netns/cni-1"}},` +
		`"DNS":[{},{"nameservers":["10.22.0.2","10.22.0.3"],"domain":"cni.local","search":["cni.example","svc.cni.example"],"options":["ndots:2"]}],"Routes":null}`
	const cniDomainOnly = `,"CNIResult":{"Interfaces":null,"DNS":[{"nameservers":["10.22.0.2"],"domain":"cni.local"}],"Routes":null}`
	const cniNone = `,"CNIResult":{"Interfaces":null,"DNS":[{},{}],"Routes":null}`
	record := func(config, outside string) []byte {
		return []byte(`{"Version":"v1","Metadata":{"ID":"x","Name":"p_ns_uid_0","Config":{"metadata":{"name":"p","uid":"uid","namespace":"ns"},` +
			`"annotations":{"` + AnnotationPortMappings + `":"8080:80"}` + config + `}` + outside + `}}`)
	}
	pod := hcn.DNS{Domain: "ns.svc.cluster.local", Search: []string{"ns.svc.cluster.local", "svc.cluster.local"}, ServerList: []string{"10.96.0.10"}, Options: []string{"ndots:5"}}
	cni := hcn.DNS{Domain: "cni.example", Search: []string{"cni.example", "svc.cni.example"}, ServerList: []string{"10.22.0.2", "10.22.0.3"}, Options: []string{"ndots:2"}}
	for _, tc := range []struct {
		name  string
		meta  []byte
		want  hcn.DNS
		noDNS bool
	}{
		{"the pod's own, beside the CNI's", record(dnsConfig, cniResult), pod, false},
		{"no DNS config: the CNI's (the first network that has resolvers)", record("", cniResult), cni, false},
		{"the CNI's without a search list: its domain", record("", cniDomainOnly), hcn.DNS{Domain: "cni.local", ServerList: []string{"10.22.0.2"}}, false},
		{"the CNI reported none: HNS must be asked", record("", cniNone), hcn.DNS{}, true},
		{"no CNIResult (hostNetwork): HNS must be asked", record("", `,"CNIResult":null`), hcn.DNS{}, true},
		// win-bridge through HNS v1 reports strings.Split of the
		// endpoint's DNSServerList and DNSSuffix on ",", so an endpoint
		// without them reads [""] (containernetworking/plugins
		// pkg/hns/endpoint_windows.go, ConstructResult)
		{"win-bridge v1 without DNS, empty strings: HNS must be asked", record("", `,"CNIResult":{"DNS":[{"nameservers":[""],"search":[""]}]}`), hcn.DNS{}, true},
		{"win-bridge v1 with servers and no suffix: the servers alone", record("", `,"CNIResult":{"DNS":[{"nameservers":["10.96.0.10"],"search":[""]}]}`),
			hcn.DNS{ServerList: []string{"10.96.0.10"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Resolve(Ask{Pod: Pod{ID: "x", Partial: true}, Metadata: tc.meta, Sources: Sources{Annotations: true, CRI: true}})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(r.DNS, tc.want) || r.NoDNS != tc.noDNS {
				t.Fatalf("DNS %+v (noDNS %v), want %+v (noDNS %v)", r.DNS, r.NoDNS, tc.want, tc.noDNS)
			}
		})
	}
}
