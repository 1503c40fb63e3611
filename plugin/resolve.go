package plugin

import (
	"fmt"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

// mappings returns the port mappings the pod's annotation asks for; an
// invalid request (or one over the limits) is an error naming the pod, the
// annotation and the entry (or the count and the limit), wrapping
// ErrInvalidPod.
func (c *Core) mappings(p Pod) ([]request.PortMapping, error) {
	v, ok := p.Annotations[request.AnnotationPortMappings]
	if !ok {
		return nil, nil
	}
	ms, err := request.ParsePortMappings(v, c.opt.Limits)
	if err != nil {
		return nil, fmt.Errorf("pod %s: annotation %s: %w: %w", p, request.AnnotationPortMappings, ErrInvalidPod, err)
	}
	return ms, nil
}

// podRequest is what a sandbox asks for.
type podRequest struct {
	pod      Pod // completed from containerd's CRI record when partial
	known    bool
	mappings []request.PortMapping
	// hostPorts: the pod's CRI record has Kubernetes hostPorts, the only
	// mappings a CNI is given (portMappings) and so can map itself
	hostPorts bool
}

// request works out what the sandbox asks for from the pod the trigger
// gave and containerd's record: a partial pod is completed from the CRI
// metadata, and the mappings come from the enabled sources (annotated:
// the annotation's, parsed already when parsed is set), merged, and are
// admitted by the node's policy. known is false for a partial pod whose
// record has no CRI metadata.
func (c *Core) request(p Pod, sb *SandboxInfo, annotated []request.PortMapping, parsed bool) (podRequest, error) {
	r := podRequest{pod: p, known: !p.Partial}
	var meta *request.CRIMetadata
	if len(sb.Metadata) > 0 && (p.Partial || c.opt.Inputs.CRI) {
		var err error
		if meta, err = request.DecodeCRIMetadata(sb.Metadata); err != nil {
			return r, fmt.Errorf("pod %s: %w: %w", p, ErrInvalidPod, err)
		}
		if p.Partial {
			r.pod = Pod{ID: p.ID, Name: meta.PodName, Namespace: meta.PodNamespace, UID: meta.PodUID,
				Annotations: meta.Annotations, Labels: meta.Labels, RuntimeHandler: meta.RuntimeHandler}
			r.known = true
		}
	}
	if !r.known {
		return r, nil
	}
	if c.opt.Inputs.Annotations && !parsed {
		var err error
		if annotated, err = c.mappings(r.pod); err != nil {
			return r, err
		}
	}
	r.mappings = annotated
	if c.opt.Inputs.CRI && meta != nil {
		cri, err := meta.HostPorts(c.opt.Limits)
		if err == nil {
			r.hostPorts = len(cri) > 0
			r.mappings, err = request.MergeMappings(annotated, cri, c.opt.Limits)
		}
		if err != nil {
			return r, fmt.Errorf("pod %s: %w: %w", r.pod, ErrInvalidPod, err)
		}
	}
	if err := c.admit(r.pod, r.mappings); err != nil {
		c.PodLog(r.pod).WithError(err).Warn("host ports denied")
		return r, fmt.Errorf("pod %s: %w", r.pod, err)
	}
	return r, nil
}

// admit applies the node's host-port admission policy to the pod's mappings.
func (c *Core) admit(p Pod, ms []request.PortMapping) error {
	pol := c.policy.Load()
	if pol == nil || len(ms) == 0 {
		return nil
	}
	return pol.Admit(admission.Pod{Namespace: p.Namespace, Labels: p.Labels}, ms)
}
