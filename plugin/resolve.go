package plugin

import (
	"context"
	"errors"
	"fmt"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

// Mappings returns the port mappings the pod's annotation asks for; an
// invalid request (or one over the limits) is an error naming the pod, the
// annotation and the entry (or the count and the limit), wrapping
// ErrInvalidPod. A pod whose annotation was parsed already is not parsed
// again.
func (c *Core) Mappings(p Pod) ([]hcn.PortMapping, error) {
	if p.parsed {
		return p.annotated, nil
	}
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

// resolved is a sandbox with everything needed to act on it.
type resolved struct {
	pod      Pod
	sb       *SandboxInfo
	mappings []hcn.PortMapping
	known    bool // the pod's request is known (false: partial pod without CRI metadata)
	// set by apply when the pod has its endpoint
	endpoint string
	policies []hcn.PortMappingPolicy
}

// resolve reads the sandbox from containerd, completes a partial pod from
// the CRI metadata and works out the mappings from the enabled sources.
func (c *Core) resolve(ctx context.Context, p Pod) (*resolved, error) {
	sb, err := c.store.Sandbox(ctx, p.ID)
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", p, err)
	}
	r := &resolved{pod: p, sb: sb, known: !p.Partial}
	if p.Partial && !sb.IsSandbox {
		return r, fmt.Errorf("container %s: %w", p.ID, ErrNotSandbox)
	}
	var meta *request.CRIMetadata
	if len(sb.Metadata) > 0 && (p.Partial || c.opt.Inputs.CRI) {
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
	var ann []hcn.PortMapping
	if c.opt.Inputs.Annotations {
		if ann, err = c.Mappings(r.pod); err != nil {
			return r, err
		}
	}
	r.mappings = ann
	if c.opt.Inputs.CRI && meta != nil {
		cri, err := meta.HostPorts(c.opt.Limits)
		if err == nil {
			r.mappings, err = request.MergeMappings(ann, cri, c.opt.Limits)
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
func (c *Core) admit(p Pod, ms []hcn.PortMapping) error {
	pol := c.policy.Load()
	if pol == nil {
		return nil
	}
	return pol.Admit(admission.Pod{Namespace: p.Namespace, Labels: p.Labels}, ms)
}

// reserve takes the pod's host ports in the index, named after the pod
// when its name is known (for the conflict message of the next pod).
func (c *Core) reserve(p Pod, policies []hcn.PortMappingPolicy) (undo func(), err error) {
	name := ""
	if p.Name != "" {
		name = p.Namespace + "/" + p.Name
	}
	return c.ports.reserve(p.ID, name, policies)
}

// describeHolder fills in the holder's pod name from containerd when the
// index only knew its sandbox ID.
func (c *Core) describeHolder(ctx context.Context, err error) {
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.Holder != "" {
		return
	}
	sb, serr := c.store.Sandbox(ctx, ce.HolderID)
	if serr != nil || len(sb.Metadata) == 0 {
		return
	}
	if md, merr := request.DecodeCRIMetadata(sb.Metadata); merr == nil && md.PodName != "" {
		ce.Holder = md.PodNamespace + "/" + md.PodName
	}
}
