package admission

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// NetworkPolicy: the plugin's endpoint is a door into the pod that no
// NetworkPolicy engine filters (Calico, Azure NPM and Antrea program the
// pod's own endpoint; ours is on another network), so a host port is
// mapped only where the pod's ingress policy already lets anyone reach
// its port: a pod no Kubernetes NetworkPolicy of its namespace selects for
// ingress is not isolated; one some select is, and a host port reaches it
// only when an ingress rule of one of them (Kubernetes takes their union)
// admits every source to the port's container port and protocol, in the
// mapping's address family.

// ErrNetworkPolicy wraps every host port a NetworkPolicy keeps out.
var ErrNetworkPolicy = errors.New("the pod's NetworkPolicy does not admit every source to it")

// ErrNetworkPolicyUnknown: the policies that select the pod cannot be
// known (not read yet, read too long ago, or a policy kind the plugin does
// not evaluate is served): nothing new is granted.
var ErrNetworkPolicyUnknown = errors.New("the NetworkPolicies that may select the pod are not known")

// NetworkPolicy is a Kubernetes NetworkPolicy as admission weighs it.
type NetworkPolicy struct {
	Namespace, Name string
	Selector        labels.Selector // spec.podSelector: the pods it selects (empty: every pod of its namespace)
	Ingress         bool            // it isolates the pods it selects for ingress
	Rules           []IngressRule
}

// IngressRule is one ingress rule: whether it admits every source of each
// address family, and to which ports.
type IngressRule struct {
	// All4, All6: every IPv4 (IPv6) source: a rule with no from, or an
	// ipBlock of the family's whole range (0.0.0.0/0, ::/0) without except
	All4, All6 bool
	Ports      []PolicyPort // none: every port
}

// PolicyPort is one entry of an ingress rule's ports.
type PolicyPort struct {
	Protocol      hcn.Protocol // 0: a protocol no host port has (SCTP)
	Port, EndPort uint16       // Port 0: every port of the protocol
	// Named is a port named in the pod's spec: the plugin does not read
	// the pod's spec (the CRI record has no port names), so it admits
	// nothing
	Named string
}

// CompileNetworkPolicy is the policy as admission weighs it. An error
// names the policy and its selector.
func CompileNetworkPolicy(np *networkingv1.NetworkPolicy) (NetworkPolicy, error) {
	sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	if err != nil {
		return NetworkPolicy{}, fmt.Errorf("NetworkPolicy %s/%s: spec.podSelector: %w", np.Namespace, np.Name, err)
	}
	out := NetworkPolicy{Namespace: np.Namespace, Name: np.Name, Selector: sel}
	// policyTypes absent: Ingress always (Kubernetes defaults it so)
	out.Ingress = len(np.Spec.PolicyTypes) == 0 || slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress)
	for _, r := range np.Spec.Ingress {
		out.Rules = append(out.Rules, compileRule(r))
	}
	return out, nil
}

func compileRule(r networkingv1.NetworkPolicyIngressRule) IngressRule {
	rule := IngressRule{All4: len(r.From) == 0, All6: len(r.From) == 0}
	for _, peer := range r.From {
		if peer.IPBlock == nil || len(peer.IPBlock.Except) > 0 || peer.PodSelector != nil || peer.NamespaceSelector != nil {
			continue
		}
		if p, err := netip.ParsePrefix(peer.IPBlock.CIDR); err == nil && p.Bits() == 0 {
			rule.All4, rule.All6 = rule.All4 || p.Addr().Is4(), rule.All6 || p.Addr().Is6()
		}
	}
	for _, p := range r.Ports {
		pp := PolicyPort{Protocol: hcn.TCP}
		if p.Protocol != nil {
			pp.Protocol = map[string]hcn.Protocol{"TCP": hcn.TCP, "UDP": hcn.UDP}[string(*p.Protocol)]
		}
		switch {
		case p.Port == nil:
		case p.Port.Type == intstr.String:
			pp.Named = p.Port.StrVal
		default:
			pp.Port = uint16(p.Port.IntVal)
		}
		if p.EndPort != nil {
			pp.EndPort = uint16(*p.EndPort)
		}
		rule.Ports = append(rule.Ports, pp)
	}
	return rule
}

// admits reports whether the rule lets every source of q's family reach
// q's container port and protocol.
func (r IngressRule) admits(q hcn.PortMappingPolicy) bool {
	if (q.IsIPv6() && !r.All6) || (!q.IsIPv6() && !r.All4) {
		return false
	}
	if len(r.Ports) == 0 {
		return true
	}
	return slices.ContainsFunc(r.Ports, func(p PolicyPort) bool {
		switch {
		case p.Protocol != q.Protocol || p.Named != "":
			return false
		case p.Port == 0:
			return true
		}
		return q.InternalPort >= p.Port && q.InternalPort <= max(p.Port, p.EndPort)
	})
}

// NetworkPolicies is what the API server last said of the cluster's
// NetworkPolicies, and of the policy kinds it serves that the plugin does
// not evaluate, as a value (package kube publishes it; its map is never
// changed once handed out). Older than MaxAge (the last list, event or
// bookmark, or the last discovery) it grants nothing.
type NetworkPolicies struct {
	ByNamespace map[string][]NetworkPolicy
	// Unevaluated are the policy kinds served that the plugin does not
	// evaluate, as group/resource (crd.antrea.io/clusternetworkpolicies)
	Unevaluated []string
	Heard       time.Time // the policies' last word (zero: never read)
	KindsHeard  time.Time // the last discovery of the kinds served (zero: never)
	MaxAge      time.Duration
	At          time.Time
}

// Stale says why the view is too old to grant anything at n.At ("": it is
// not); kinds: the kinds served matter (they are read by discovery).
func (n NetworkPolicies) Stale(kinds bool) string {
	oldest := n.Heard
	switch {
	case n.Heard.IsZero():
		return "the NetworkPolicies have not been read from the API server yet"
	case kinds && n.KindsHeard.IsZero():
		return "the policy kinds the API server serves have not been read yet"
	case kinds && n.KindsHeard.Before(oldest):
		oldest = n.KindsHeard
	}
	if age := n.At.Sub(oldest); age > n.MaxAge {
		return fmt.Sprintf("nothing has been heard from the API server of its NetworkPolicies for %s (kubernetes.labels_max_age = %s): "+
			"what was read before is too old to grant host ports", age.Round(time.Second), n.MaxAge)
	}
	return ""
}

// NetworkPolicyError is a host port the pod's NetworkPolicies keep out.
type NetworkPolicyError struct {
	Mapping  string   // the host port, as host:port->port/proto
	Policies []string // namespace/name of each policy that selects the pod for ingress
}

func (e *NetworkPolicyError) Error() string {
	return fmt.Sprintf("host port %s: %s: NetworkPolicy %s selects the pod for ingress and no ingress rule of %s admits every source "+
		"to its container port, so a host port would let in what the policy keeps out (no NetworkPolicy engine filters the plugin's "+
		"endpoint); it is not mapped. Admit every source to that port (an ingress rule without from, or with an ipBlock of 0.0.0.0/0 "+
		"or ::/0), or set admission.network_policy = %q on nodes whose host ports no policy needs to filter",
		e.Mapping, ErrNetworkPolicy, strings.Join(e.Policies, ", "), them(len(e.Policies)), config.NetworkPolicyOff)
}

func (e *NetworkPolicyError) Unwrap() error { return ErrNetworkPolicy }

func them(n int) string {
	if n == 1 {
		return "it"
	}
	return "them"
}

// NetworkPolicyUnknownError is a host port held back while the policies
// that may select the pod are not known.
type NetworkPolicyUnknownError struct{ Why string }

func (e *NetworkPolicyUnknownError) Error() string {
	return fmt.Sprintf("host ports not mapped: %s: %s; they are mapped once it is known and admits them", ErrNetworkPolicyUnknown, e.Why)
}

func (e *NetworkPolicyUnknownError) Unwrap() error { return ErrNetworkPolicyUnknown }

// NetworkPolicyMode is admission.network_policy.
func (p *Policy) NetworkPolicyMode() string { return p.networkPolicy }

// AdmitNetwork admits the host ports the plugin's endpoint would map for
// the pod (policies: what HNS would be asked, each in its address family)
// by the NetworkPolicies in force (np nil: they cannot be read,
// kubernetes.enabled = false): every one must reach a port of a pod no
// policy isolates for ingress, or one an ingress rule of a policy that
// selects the pod admits every source to. What the plugin cannot know (the
// policies not read, read too long ago, a kind served it does not
// evaluate) grants nothing.
func (p *Policy) AdmitNetwork(pod Pod, policies []hcn.PortMappingPolicy, np *NetworkPolicies) error {
	mode := p.networkPolicy
	switch {
	case mode == config.NetworkPolicyOff || len(policies) == 0:
		return nil
	case np == nil:
		return &NetworkPolicyUnknownError{Why: `kubernetes.enabled = false: the plugin cannot read the cluster's NetworkPolicies; enable [kubernetes], ` +
			`or set admission.network_policy = "off" where no NetworkPolicy needs to filter host ports`}
	}
	if why := np.Stale(mode == config.NetworkPolicyKubernetes); why != "" {
		return &NetworkPolicyUnknownError{Why: why}
	}
	if mode == config.NetworkPolicyKubernetes && len(np.Unevaluated) > 0 {
		return &NetworkPolicyUnknownError{Why: fmt.Sprintf("the API server serves %s, policy kinds the plugin does not evaluate, which may isolate "+
			`the pod; set admission.network_policy = %q where none of them selects a pod with host ports`, strings.Join(np.Unevaluated, ", "),
			config.NetworkPolicyKubernetesOnly)}
	}
	var selecting []NetworkPolicy
	for _, pol := range np.ByNamespace[pod.Namespace] {
		if pol.Ingress && pol.Selector.Matches(labels.Set(pod.Labels)) {
			selecting = append(selecting, pol)
		}
	}
	if len(selecting) == 0 {
		return nil
	}
	for _, q := range policies {
		if !slices.ContainsFunc(selecting, func(pol NetworkPolicy) bool {
			return slices.ContainsFunc(pol.Rules, func(r IngressRule) bool { return r.admits(q) })
		}) {
			e := &NetworkPolicyError{Mapping: q.String()}
			for _, pol := range selecting {
				e.Policies = append(e.Policies, pol.Namespace+"/"+pol.Name)
			}
			return e
		}
	}
	return nil
}
