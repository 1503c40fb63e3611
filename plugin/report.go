package plugin

import (
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
	Endpoint string // when mapped
	Policies []hcn.PortMappingPolicy
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
)

type nopReporter struct{}

func (nopReporter) Report(PodReport) {}

// report tells the reporter how a start or repair of the pod's mappings
// ended: mapped by endpoint ep with policies, or failed with err (when err
// is the owners' business).
func (c *Core) report(p Pod, ep *hcn.Endpoint, policies []hcn.PortMappingPolicy, err error) {
	if p.Name == "" {
		return
	}
	if err == nil {
		if ep != nil {
			c.opt.Reporter.Report(PodReport{Pod: p, Mapped: true, Endpoint: ep.ID, Policies: policies})
		}
		return
	}
	if reason := failureReason(err); reason != "" {
		c.opt.Reporter.Report(PodReport{Pod: p, Reason: reason, Err: err})
	}
}
