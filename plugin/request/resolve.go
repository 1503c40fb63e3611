package request

import (
	"errors"
	"fmt"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// ErrInvalid wraps errors caused by the pod's own request (a bad
// annotation, a hostPort HNS cannot honour): retrying will not help.
var ErrInvalid = errors.New("invalid pod request")

// Pod is what an event source knows of a pod sandbox.
type Pod struct {
	ID          string // sandbox ID = containerd container ID
	Name        string
	Namespace   string // Kubernetes namespace
	UID         string
	Annotations map[string]string
	Labels      map[string]string
	// RuntimeHandler is the CRI runtime handler (e.g. runhcs-wcow-hypervisor).
	RuntimeHandler string
	// Partial: only the ID is known (a containerd event, a resync, an
	// orphan); name, namespace and annotations are read from containerd's
	// CRI sandbox metadata.
	Partial bool
}

// HolderName is how the pod is named to another pod that asks for its
// host ports: namespace/name, "" when the name is not known.
func (p Pod) HolderName() string {
	if p.Name == "" {
		return ""
	}
	return p.Namespace + "/" + p.Name
}

func (p Pod) String() string {
	if p.Name == "" {
		return "sandbox " + p.ID
	}
	return p.Namespace + "/" + p.Name
}

// Sources says where a pod's port mappings are read from.
type Sources struct {
	Annotations bool // the hcn.nri.io/port-mappings annotation
	CRI         bool // Kubernetes hostPort, from containerd's CRI sandbox metadata
}

// Ask is what Resolve works from, every part a value: the pod as the
// trigger gave it, containerd's record of the sandbox, and the node's
// rules.
type Ask struct {
	Pod Pod
	// Metadata is the record's io.cri-containerd.sandbox.metadata; nil
	// when it was not read (a whole pod whose annotation is the only
	// source) or there is none.
	Metadata []byte
	Sources  Sources
	Limits   Limits
	Policy   PolicyOptions
}

// Request is what a pod asks for, resolved once.
type Request struct {
	Pod Pod // completed from the record when the trigger knew only the ID
	// Known is false for a partial pod whose record has no CRI metadata,
	// or none that decodes: what it asks for is not known.
	Known    bool
	Mappings []PortMapping
	// Annotated are the mappings of Mappings the annotation asks for
	// (what the namespace's Pod Security level judges).
	Annotated []PortMapping
	Policies  []hcn.PortMappingPolicy // Mappings as HNS policies
	// HostPorts: Kubernetes hostPorts are among the mappings, the only
	// mappings a CNI is given (portMappings) and so can map itself.
	HostPorts bool
	// DNS is the pod's own, from its record, or where the pod's config
	// has none the DNS the CNI reported in the record (zero: not known);
	// NoDNS says the record has neither: its interface's DNS is the CNI
	// endpoint's, which only HNS can tell.
	DNS   hcn.DNS
	NoDNS bool
	// Unreadable: the record does not decode, so its hostPorts (and, for
	// a partial pod, everything) are not known. The record is the
	// runtime's, not the pod author's: it never fails the pod.
	Unreadable error
}

// Resolve works out what the pod asks for from nothing but a: a partial
// pod is completed from the record's CRI metadata; the mappings come from
// the sources (the annotation's, and the record's hostPorts), merged and
// held to the limits; and the mappings become HNS policies. The error is
// the pod's request refused as invalid (wrapping ErrInvalid, naming the
// annotation and the entry). Whether the pod may have what it asks for is
// admission's to say, not Resolve's.
func Resolve(a Ask) (Request, error) {
	r := Request{Pod: a.Pod, Known: !a.Pod.Partial}
	var meta *CRIMetadata
	if len(a.Metadata) > 0 {
		var err error
		switch meta, err = DecodeCRIMetadata(a.Metadata); {
		case err != nil && (a.Pod.Partial || a.Sources.CRI): // what the pod asks for is not (all) known
			r.Unreadable = fmt.Errorf("sandbox %s: %w", a.Pod.ID, err)
		case err != nil: // the pod's DNS alone is not known
		case a.Pod.Partial:
			r.Pod = Pod{ID: a.Pod.ID, Name: meta.PodName, Namespace: meta.PodNamespace, UID: meta.PodUID,
				Annotations: meta.Annotations, Labels: meta.Labels, RuntimeHandler: meta.RuntimeHandler}
			r.Known = true
		}
		switch {
		case meta == nil:
		case len(meta.DNS.ServerList) > 0:
			r.DNS = meta.DNS
		case len(meta.CNIDNS.ServerList) > 0: // no DNS config (dnsPolicy None, or a runtime that keeps none): the CNI's
			r.DNS = meta.CNIDNS
		default:
			r.DNS, r.NoDNS = meta.DNS, true
		}
	}
	if !r.Known {
		return r, nil
	}
	annotated, err := Annotated(r.Pod, a.Sources, a.Limits)
	if err != nil {
		return r, err
	}
	r.Mappings, r.Annotated = annotated, annotated
	if a.Sources.CRI && meta != nil {
		cri, err := meta.HostPorts(a.Limits)
		if err == nil {
			r.HostPorts = len(cri) > 0
			r.Mappings, err = MergeMappings(annotated, cri, a.Limits)
		}
		if err != nil {
			return r, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	r.Policies = BuildPolicies(r.Mappings, a.Policy)
	return r, nil
}

// Annotated is what the pod's annotation asks for, where the annotation is
// a source: all a whole pod whose annotation is the only source asks for,
// known before containerd's record is read.
func Annotated(p Pod, sources Sources, limits Limits) ([]PortMapping, error) {
	v, ok := p.Annotations[AnnotationPortMappings]
	if !ok || !sources.Annotations {
		return nil, nil
	}
	ms, err := ParsePortMappings(v, limits)
	if err != nil {
		return nil, fmt.Errorf("annotation %s: %w: %w", AnnotationPortMappings, ErrInvalid, err)
	}
	return ms, nil
}
