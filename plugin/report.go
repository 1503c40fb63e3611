package plugin

import (
	"fmt"
	"strings"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
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
	ReasonHyperV   = "HyperVIsolated"
	ReasonHNS      = "HNSError"
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
}

// String says who maps the port.
func (m CNIMapping) String() string {
	s := m.Policy.String() + " by the CNI's endpoint " + m.Endpoint
	if !m.Works {
		s += " (will not work)"
	}
	return s
}

// ineffective returns the CNI mappings that will not work, as an error
// naming each endpoint, policy and the fix.
func ineffective(p Pod, cni []CNIMapping) error {
	var why []string
	fix := ""
	for _, m := range cni {
		if !m.Works {
			why = append(why, m.Why)
			fix = m.Fix
		}
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("pod %s: %s; fix: %s", p, strings.Join(why, "; "), fix)
}

type nopReporter struct{}

func (nopReporter) Report(PodReport) {}

// ownersReport is what a pod's owners are told of a sync, derived once
// from its outcome: a failure whose row in the table of errors has a
// reason (reason, the row's), or who maps its host ports (a CNI mapping that will not work
// makes that a failure naming it); and, when containerd's record does not
// decode, that its hostPorts are unknown. Nothing for a pod whose name is
// not known, or a sandbox that stopped or is gone (nobody is there to
// tell).
func ownersReport(sn snap, out outcome, reason string) *PodReport {
	p := out.pod
	if p.Name == "" || sn.stopped || sn.removed || out.known.final || out.known.gone {
		return nil
	}
	var rep *PodReport
	switch {
	case out.err != nil:
		if reason != "" {
			rep = &PodReport{Pod: p, Reason: reason, Err: out.err}
		}
	case out.mapped != nil:
		m := out.mapped
		rep = &PodReport{Pod: p, Mapped: true, Policies: m.policies, CNI: m.cni}
		if m.endpoint != nil {
			rep.Endpoint = m.endpoint.ID
		}
		if bad := ineffective(p, m.cni); bad != nil {
			rep.Mapped, rep.Reason, rep.Err = false, ReasonCNIMapping, bad
		}
	}
	if out.unreadable == nil || (rep != nil && !rep.Mapped) { // a failure of the pod's own request says more
		return rep
	}
	unknown := PodReport{Pod: p}
	if rep != nil {
		unknown = *rep
	}
	unknown.Mapped, unknown.Reason = false, failureReason(out.unreadable)
	unknown.Err = fmt.Errorf("pod %s: its hostPorts are not known, and not mapped: %w; mapping goes on for what is known (the annotation)", p, out.unreadable)
	return &unknown
}
