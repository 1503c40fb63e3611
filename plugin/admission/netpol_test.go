package admission

import (
	"errors"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// policy is a NetworkPolicy of namespace "team" from its YAML spec.
func policy(t *testing.T, name, spec string) NetworkPolicy {
	t.Helper()
	var np networkingv1.NetworkPolicy
	if err := yaml.UnmarshalStrict([]byte("metadata: {name: "+name+", namespace: team}\nspec:\n  "+strings.ReplaceAll(spec, "\n", "\n  ")), &np); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	c, err := CompileNetworkPolicy(&np)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Issue 52: a host port is mapped only where the pod's ingress policy
// already lets anyone reach it. Policies × pods × ports, each row with the
// verdict and, when refused, the policies named.
func TestAHostPortIsMappedOnlyWhereThePodsIngressPolicyAdmitsEveryone(t *testing.T) {
	web := Pod{Namespace: "team", Labels: map[string]string{"app": "web", "tier": "front"}}
	tcp80 := hcn.PortMappingPolicy{Protocol: hcn.TCP, ExternalPort: 8080, InternalPort: 80}
	tcp80v6 := hcn.PortMappingPolicy{Protocol: hcn.TCP, ExternalPort: 8080, InternalPort: 80, Flags: hcn.NatFlagsIPv6}
	udp53 := hcn.PortMappingPolicy{Protocol: hcn.UDP, ExternalPort: 5353, InternalPort: 53}
	p := func(name, spec string) NetworkPolicy { return policy(t, name, spec) }
	for _, tc := range []struct {
		name     string
		policies []NetworkPolicy
		pod      Pod
		ask      []hcn.PortMappingPolicy
		refused  string // "": admitted; else the policies the refusal names
	}{
		{"no policy: not isolated", nil, web, []hcn.PortMappingPolicy{tcp80, udp53}, ""},
		{"default deny (policyTypes Ingress, no rule)", []NetworkPolicy{p("deny", "podSelector: {}\npolicyTypes: [Ingress]")}, web,
			[]hcn.PortMappingPolicy{tcp80}, "team/deny"},
		{"policyTypes absent, no rule: Ingress all the same", []NetworkPolicy{p("deny", "podSelector: {}")}, web,
			[]hcn.PortMappingPolicy{tcp80}, "team/deny"},
		{"Egress only: not isolated for ingress", []NetworkPolicy{p("egress", "podSelector: {}\npolicyTypes: [Egress]")}, web,
			[]hcn.PortMappingPolicy{tcp80}, ""},
		{"a rule with no from: every source, every port, both families", []NetworkPolicy{p("open", "podSelector: {}\ningress: [{}]")}, web,
			[]hcn.PortMappingPolicy{tcp80, tcp80v6, udp53}, ""},
		{"from clients only", []NetworkPolicy{p("clients", "podSelector: {}\ningress: [{from: [{podSelector: {matchLabels: {role: client}}}]}]")}, web,
			[]hcn.PortMappingPolicy{tcp80}, "team/clients"},
		{"from every namespace's pods: still not every source", []NetworkPolicy{p("pods", "podSelector: {}\ningress: [{from: [{namespaceSelector: {}}]}]")}, web,
			[]hcn.PortMappingPolicy{tcp80}, "team/pods"},
		{"ipBlock 0.0.0.0/0: every IPv4 source", []NetworkPolicy{p("v4", "podSelector: {}\ningress: [{from: [{ipBlock: {cidr: 0.0.0.0/0}}]}]")}, web,
			[]hcn.PortMappingPolicy{tcp80}, ""},
		{"... but not the IPv6 host port", []NetworkPolicy{p("v4", "podSelector: {}\ningress: [{from: [{ipBlock: {cidr: 0.0.0.0/0}}]}]")}, web,
			[]hcn.PortMappingPolicy{tcp80, tcp80v6}, "team/v4"},
		{"ipBlock ::/0: the IPv6 host port", []NetworkPolicy{p("v6", "podSelector: {}\ningress: [{from: [{ipBlock: {cidr: '::/0'}}]}]")}, web,
			[]hcn.PortMappingPolicy{tcp80v6}, ""},
		{"ipBlock 0.0.0.0/0 with an except: not every source", []NetworkPolicy{p("except",
			"podSelector: {}\ningress: [{from: [{ipBlock: {cidr: 0.0.0.0/0, except: [10.0.0.0/8]}}]}]")}, web, []hcn.PortMappingPolicy{tcp80}, "team/except"},
		{"a narrower ipBlock", []NetworkPolicy{p("lan", "podSelector: {}\ningress: [{from: [{ipBlock: {cidr: 10.0.0.0/8}}]}]")}, web,
			[]hcn.PortMappingPolicy{tcp80}, "team/lan"},
		{"port by number", []NetworkPolicy{p("p80", "podSelector: {}\ningress: [{ports: [{port: 80}]}]")}, web, []hcn.PortMappingPolicy{tcp80}, ""},
		{"another port", []NetworkPolicy{p("p81", "podSelector: {}\ningress: [{ports: [{port: 81}]}]")}, web, []hcn.PortMappingPolicy{tcp80}, "team/p81"},
		{"a range with endPort", []NetworkPolicy{p("range", "podSelector: {}\ningress: [{ports: [{port: 70, endPort: 90}]}]")}, web,
			[]hcn.PortMappingPolicy{tcp80}, ""},
		{"a range that ends below", []NetworkPolicy{p("range", "podSelector: {}\ningress: [{ports: [{port: 70, endPort: 79}]}]")}, web,
			[]hcn.PortMappingPolicy{tcp80}, "team/range"},
		{"a named port: not resolved, admits nothing", []NetworkPolicy{p("named", "podSelector: {}\ningress: [{ports: [{port: http}]}]")}, web,
			[]hcn.PortMappingPolicy{tcp80}, "team/named"},
		{"UDP port, TCP asked", []NetworkPolicy{p("dns", "podSelector: {}\ningress: [{ports: [{protocol: UDP, port: 80}]}]")}, web,
			[]hcn.PortMappingPolicy{tcp80}, "team/dns"},
		{"UDP port, UDP asked", []NetworkPolicy{p("dns", "podSelector: {}\ningress: [{ports: [{protocol: UDP, port: 53}]}]")}, web,
			[]hcn.PortMappingPolicy{udp53}, ""},
		{"protocol only: every port of it", []NetworkPolicy{p("udp", "podSelector: {}\ningress: [{ports: [{protocol: UDP}]}]")}, web,
			[]hcn.PortMappingPolicy{udp53, tcp80}, "team/udp"},
		{"matchLabels that select another pod", []NetworkPolicy{p("db", "podSelector: {matchLabels: {app: db}}\npolicyTypes: [Ingress]")}, web,
			[]hcn.PortMappingPolicy{tcp80}, ""},
		{"matchExpressions In", []NetworkPolicy{p("in", "podSelector: {matchExpressions: [{key: app, operator: In, values: [web]}]}\npolicyTypes: [Ingress]")},
			web, []hcn.PortMappingPolicy{tcp80}, "team/in"},
		{"matchExpressions NotIn", []NetworkPolicy{p("notin", "podSelector: {matchExpressions: [{key: app, operator: NotIn, values: [web]}]}\npolicyTypes: [Ingress]")},
			web, []hcn.PortMappingPolicy{tcp80}, ""},
		{"two policies, one narrower: their union admits", []NetworkPolicy{
			p("clients", "podSelector: {}\ningress: [{from: [{podSelector: {matchLabels: {role: client}}}]}]"),
			p("web", "podSelector: {matchLabels: {app: web}}\ningress: [{ports: [{port: 80}]}]")}, web, []hcn.PortMappingPolicy{tcp80}, ""},
		{"two policies, neither admits: both named", []NetworkPolicy{
			p("clients", "podSelector: {}\ningress: [{from: [{podSelector: {matchLabels: {role: client}}}]}]"),
			p("deny", "podSelector: {}\npolicyTypes: [Ingress]")}, web, []hcn.PortMappingPolicy{tcp80}, "team/clients, team/deny"},
		{"a policy of another namespace", []NetworkPolicy{p("deny", "podSelector: {}\npolicyTypes: [Ingress]")},
			Pod{Namespace: "other", Labels: web.Labels}, []hcn.PortMappingPolicy{tcp80}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol := compiled(t, config.NetworkPolicyKubernetes)
			now := time.Now()
			np := &NetworkPolicies{ByNamespace: map[string][]NetworkPolicy{"team": tc.policies}, Heard: now, KindsHeard: now, MaxAge: time.Minute, At: now}
			err := pol.AdmitNetwork(tc.pod, tc.ask, np)
			if tc.refused == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var npe *NetworkPolicyError
			if !errors.As(err, &npe) || !errors.Is(err, ErrNetworkPolicy) || strings.Join(npe.Policies, ", ") != tc.refused {
				t.Fatalf("%v: want refused naming %s", err, tc.refused)
			}
		})
	}
}

func compiled(t *testing.T, mode string) *Policy {
	t.Helper()
	a := config.DefaultAdmission()
	a.NetworkPolicy = mode
	pol, err := Compile(a)
	if err != nil {
		t.Fatal(err)
	}
	return pol
}

// What the plugin cannot know grants nothing: policies never read or
// read too long ago, kinds never discovered, a kind served it does not
// evaluate (unless the operator says none of them matters), no API
// server at all; and "off" is the operator's word that nothing filters.
func TestWhatCannotBeKnownGrantsNothing(t *testing.T) {
	now := time.Now()
	fresh := NetworkPolicies{ByNamespace: map[string][]NetworkPolicy{}, Heard: now, KindsHeard: now, MaxAge: time.Minute, At: now}
	with := func(change func(*NetworkPolicies)) *NetworkPolicies { n := fresh; change(&n); return &n }
	antrea := with(func(n *NetworkPolicies) { n.Unevaluated = []string{"crd.antrea.io/clusternetworkpolicies"} })
	ask := []hcn.PortMappingPolicy{{Protocol: hcn.TCP, ExternalPort: 8080, InternalPort: 80}}
	for _, tc := range []struct {
		name string
		mode string
		np   *NetworkPolicies
		says string // "": admitted
	}{
		{"known, nothing selects", config.NetworkPolicyKubernetes, &fresh, ""},
		{"never read", config.NetworkPolicyKubernetes, with(func(n *NetworkPolicies) { n.Heard = time.Time{} }), "not been read"},
		{"read too long ago", config.NetworkPolicyKubernetes, with(func(n *NetworkPolicies) { n.At = now.Add(2 * time.Minute) }), "too old"},
		{"kinds never discovered", config.NetworkPolicyKubernetes, with(func(n *NetworkPolicies) { n.KindsHeard = time.Time{} }), "kinds"},
		{"kinds discovered too long ago", config.NetworkPolicyKubernetes, with(func(n *NetworkPolicies) { n.KindsHeard = now.Add(-2 * time.Minute) }), "too old"},
		{"another kind served", config.NetworkPolicyKubernetes, antrea, `crd.antrea.io/clusternetworkpolicies, policy kinds the plugin does not evaluate`},
		{"another kind served, the operator says it selects no host-port pod", config.NetworkPolicyKubernetesOnly, antrea, ""},
		{"kubernetes-only needs no discovery", config.NetworkPolicyKubernetesOnly, with(func(n *NetworkPolicies) { n.KindsHeard = time.Time{} }), ""},
		{"no API server", config.NetworkPolicyKubernetes, nil, `admission.network_policy = "off"`},
		{"off", config.NetworkPolicyOff, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := compiled(t, tc.mode).AdmitNetwork(Pod{Namespace: "team"}, ask, tc.np)
			switch {
			case tc.says == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.says != "" && (!errors.Is(err, ErrNetworkPolicyUnknown) || !strings.Contains(err.Error(), tc.says)):
				t.Fatalf("%v: want held back saying %q", err, tc.says)
			}
		})
	}
}
