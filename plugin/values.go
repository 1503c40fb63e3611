package plugin

import (
	"strings"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// The values the controller's files share: what an operation did to a
// sandbox, and what its owners are told. This file uses no other.

// Change says what an operation did to one sandbox's endpoint (hcn.Outcome
// tells apart how an endpoint was built; Change adds "nothing to do" and
// "removed", which the core reports for every kind of operation).
type Change int

// Changes.
const (
	NoChange Change = iota // nothing to do (no mappings, no namespace)
	Kept                   // the right endpoint already existed
	Built                  // endpoint created (or replaced, or re-attached)
	Removed                // endpoint(s) removed
)

// Reporter tells a pod's owners what became of its host ports (Kubernetes
// events and a pod condition, package kube). Report must return at once:
// the API server is never on the path of HCN work.
type Reporter interface {
	Report(PodReport)
}

// PodReport is the outcome of one start or repair of a pod with mappings.
type PodReport struct {
	Pod      Pod
	Mapped   bool
	Endpoint string                  // ours, when it maps some of the pod's host ports
	Policies []hcn.PortMappingPolicy // what ours maps
	// CNI: the pod's host ports another endpoint of its namespace (the
	// CNI's) maps already; one that will not work makes the report a
	// failure (ReasonCNIMapping).
	CNI []CNIMapping
	// Reason says why mapping failed (Reason* constants); Err is the same
	// text the NRI path returns.
	Reason string
	Err    error
}

// Reasons a pod's mappings failed, as its owners see them.
const (
	ReasonInvalid  = "InvalidPortMappings"
	ReasonDenied   = "HostPortDenied"
	ReasonConflict = "HostPortConflict"
	// ReasonHeldByNode: a program of the node holds the host port, or it
	// is in a range the node excludes (issue 56): the node's business,
	// not the pod's
	ReasonHeldByNode = "HostPortHeldByNode"
	ReasonHyperV     = "HyperVIsolated"
	ReasonHNS        = "HNSError"
	// ReasonCNIMapping: a host port the CNI's endpoint maps in a way known
	// not to work (the plugin cannot map it too: HNS takes a port once).
	ReasonCNIMapping = "CNIPortMappingIneffective"
	// ReasonHostPortsUnknown: containerd's CRI record of the sandbox, where
	// its hostPorts are, does not decode (a containerd whose format
	// changed): they are not mapped; the annotation's are.
	ReasonHostPortsUnknown = "HostPortsUnknown"
	// ReasonPodSecurity: the annotation refused by the namespace's Pod
	// Security level (baseline, restricted), as hostPort is.
	ReasonPodSecurity = "PodSecurityForbidsHostPorts"
	// ReasonPodSecurityUnknown: the annotation held back while the
	// namespace's level has not been read from the API server.
	ReasonPodSecurityUnknown = "PodSecurityLevelUnknown"
	// ReasonNetworkPolicy: a NetworkPolicy selects the pod for ingress and
	// does not admit every source to a host port's container port: the
	// port is not mapped (the plugin's endpoint would let in what the
	// policy keeps out).
	ReasonNetworkPolicy = "NetworkPolicyIsolatesPod"
	// ReasonNetworkPolicyUnknown: the NetworkPolicies that may select the
	// pod are not known (not read yet, read too long ago, a policy kind
	// the plugin does not evaluate): host ports are not mapped.
	ReasonNetworkPolicyUnknown = "NetworkPolicyUnknown"
	// ReasonContainerd: containerd did not answer, so what the pod asks
	// for could not be read (retried until it answers).
	ReasonContainerd = "ContainerdUnavailable"
)

// CNIMapping is one of the pod's host ports that another endpoint of its
// namespace, the CNI's, maps already.
type CNIMapping struct {
	Policy   hcn.PortMappingPolicy `json:"policy"`   // what the pod asks for
	Endpoint string                `json:"endpoint"` // the CNI endpoint's ID
	Name     string                `json:"name"`
	V1NAT    bool                  `json:"v1NAT,omitempty"` // as an HNS v1 NAT policy
	Works    bool                  `json:"works"`
	Why      string                `json:"why,omitempty"` // when it will not work
	Fix      string                `json:"fix,omitempty"`
	// HostIPDropped is the host IP the pod asked that the CNI's mapping,
	// on every address, dropped (EKS's vpc-bridge): "" when it kept it
	HostIPDropped string `json:"hostIPDropped,omitempty"`
}

// String says who maps the port.
func (m CNIMapping) String() string {
	return m.Policy.String() + " by the CNI's endpoint " + m.Endpoint + m.Notes()
}

// Said is what to know of the CNI's mapping beside who makes it: that it
// will not work, that it dropped the host IP.
func (m CNIMapping) Said() []string {
	var n []string
	if !m.Works {
		n = append(n, "will not work")
	}
	if m.HostIPDropped != "" {
		n = append(n, "on every address: the CNI dropped the host IP "+m.HostIPDropped)
	}
	return n
}

// Notes is Said in parentheses, after a space ("" when nothing).
func (m CNIMapping) Notes() string {
	if n := m.Said(); len(n) > 0 {
		return " (" + strings.Join(n, "; ") + ")"
	}
	return ""
}

type nopReporter struct{}

func (nopReporter) Report(PodReport) {}

// AnnotationConfigSource is kubelet's annotation of where a pod came from:
// "api", or "file" and "http" for a static pod (whose mirror pod in the API
// server has another UID than its sandbox).
const AnnotationConfigSource = "kubernetes.io/config.source"
