package plugin

import (
	"context"
	"errors"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
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

// failureReason is why err failed the pod's mappings, "" when err is not
// the pod owner's business (the sandbox went away, the plugin stops, a
// retry is already planned on a busy holder).
func failureReason(err error) string {
	switch {
	case errors.Is(err, ErrNotSandbox), errors.Is(err, ErrSandboxNotFound), hcn.NamespaceGone(err),
		errors.Is(err, errHolderBusy), errors.Is(err, errHolderUnknown), errors.Is(err, context.Canceled):
		return ""
	case errors.Is(err, ErrHyperV):
		return ReasonHyperV
	case errors.Is(err, ErrInvalidPod):
		return ReasonInvalid
	case errors.Is(err, admission.ErrDenied):
		return ReasonDenied
	case errors.Is(err, ErrPortConflict):
		return ReasonConflict
	}
	return ReasonHNS
}

// report tells the reporter how r's start or repair ended.
func (c *Core) report(r *resolved, err error) {
	if r == nil || r.pod.Name == "" {
		return
	}
	if err == nil {
		if r.endpoint != "" { // a pod with mappings, attached
			c.opt.Reporter.Report(PodReport{Pod: r.pod, Mapped: true, Endpoint: r.endpoint, Policies: r.policies})
		}
		return
	}
	if reason := failureReason(err); reason != "" {
		c.opt.Reporter.Report(PodReport{Pod: r.pod, Reason: reason, Err: err})
	}
}
