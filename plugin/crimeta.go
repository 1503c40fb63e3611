package plugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// ErrBadMetadata wraps errors decoding containerd's CRI sandbox metadata.
var ErrBadMetadata = errors.New("invalid CRI sandbox metadata")

// CRIMetadata is what the plugin takes from the sandbox container's
// io.cri-containerd.sandbox.metadata extension.
type CRIMetadata struct {
	ID, Name              string // sandbox ID and CRI sandbox name
	PodName, PodNamespace string
	PodUID                string
	Annotations           map[string]string
	Labels                map[string]string
	RawPortMappings       []CRIPortMapping // as stored; see HostPorts
	NetNSPath             string
}

// CRIPortMapping mirrors runtime.v1.PortMapping as containerd stores it
// (encoding/json over the generated struct: enums as numbers, zero values
// omitted, so TCP has no "protocol" key).
type CRIPortMapping struct {
	Protocol      int32  `json:"protocol,omitempty"`
	ContainerPort int32  `json:"container_port,omitempty"`
	HostPort      int32  `json:"host_port,omitempty"`
	HostIP        string `json:"host_ip,omitempty"`
}

// criMetadataJSON mirrors containerd's versioned sandbox metadata (the type
// is internal to containerd): {"Version":"v1","Metadata":{ID,Name,Config,...}}.
type criMetadataJSON struct {
	Version  string
	Metadata *struct {
		ID        string
		Name      string
		NetNSPath string
		Config    *struct {
			Metadata *struct {
				Name      string `json:"name"`
				UID       string `json:"uid"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
			Annotations  map[string]string `json:"annotations"`
			Labels       map[string]string `json:"labels"`
			PortMappings []CRIPortMapping  `json:"port_mappings"`
		}
	}
}

// CRI protocol enum values (runtime.v1.Protocol).
const (
	criTCP  = 0
	criUDP  = 1
	criSCTP = 2
)

// DecodeCRIMetadata decodes the raw extension. Errors wrap ErrBadMetadata
// and say what is wrong.
func DecodeCRIMetadata(raw []byte) (*CRIMetadata, error) {
	var m criMetadataJSON
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadMetadata, ExtensionMetadata, err)
	}
	if m.Version != "v1" {
		return nil, fmt.Errorf("%w: %s: version %q, want v1", ErrBadMetadata, ExtensionMetadata, m.Version)
	}
	if m.Metadata == nil || m.Metadata.Config == nil {
		return nil, fmt.Errorf("%w: %s: no Metadata.Config", ErrBadMetadata, ExtensionMetadata)
	}
	md, cfg := m.Metadata, m.Metadata.Config
	out := &CRIMetadata{ID: md.ID, Name: md.Name, NetNSPath: md.NetNSPath, Annotations: cfg.Annotations,
		Labels: cfg.Labels, RawPortMappings: cfg.PortMappings}
	if cfg.Metadata != nil {
		out.PodName, out.PodNamespace, out.PodUID = cfg.Metadata.Name, cfg.Metadata.Namespace, cfg.Metadata.UID
	}
	return out, nil
}

// HostPorts returns the Kubernetes hostPort mappings, skipping entries
// without a host port (containerd skips them too). A mapping HNS cannot
// honour is an error that names it; more host ports than lim allows is an
// error before any is converted.
func (md *CRIMetadata) HostPorts(lim Limits) ([]hcn.PortMapping, error) {
	n := 0
	for _, pm := range md.RawPortMappings {
		if pm.HostPort != 0 {
			n++
		}
	}
	if err := lim.checkCount(n); err != nil {
		return nil, fmt.Errorf("CRI hostPorts: %w", err)
	}
	out := make([]hcn.PortMapping, 0, n)
	for i, pm := range md.RawPortMappings {
		if pm.HostPort == 0 {
			continue
		}
		mapping, reason := pm.mapping()
		if reason != "" {
			return nil, &MappingError{Entry: fmt.Sprintf("CRI port_mappings[%d] (%s)", i, pm), Reason: reason}
		}
		out = append(out, mapping)
	}
	if err := CheckOverlaps(out, func(i int) string { return fmt.Sprintf("CRI hostPort %q", out[i].String()) }); err != nil {
		return nil, err
	}
	return out, nil
}

func (pm CRIPortMapping) String() string {
	s := "hostPort " + strconv.Itoa(int(pm.HostPort)) + " -> containerPort " + strconv.Itoa(int(pm.ContainerPort)) + " protocol " + strconv.Itoa(int(pm.Protocol))
	if pm.HostIP != "" {
		s += " hostIP " + pm.HostIP
	}
	return s
}

func (pm CRIPortMapping) mapping() (hcn.PortMapping, string) {
	var m hcn.PortMapping
	switch pm.Protocol {
	case criTCP:
		m.Protocol = hcn.TCP
	case criUDP:
		m.Protocol = hcn.UDP
	case criSCTP:
		return m, "protocol SCTP is not supported by HNS port mappings (only TCP and UDP)"
	default:
		return m, fmt.Sprintf("unknown CRI protocol %d", pm.Protocol)
	}
	var reason string
	if m.HostPort, reason = checkPort("hostPort", int(pm.HostPort)); reason != "" {
		return m, reason
	}
	if m.ContainerPort, reason = checkPort("containerPort", int(pm.ContainerPort)); reason != "" {
		return m, reason
	}
	if pm.HostIP != "" {
		if m.HostIP, reason = parseHostIP(pm.HostIP); reason != "" {
			return m, reason
		}
	}
	return m, ""
}

// MergeMappings combines annotation and CRI mappings: the same mapping from
// both counts once; a CRI mapping that claims a host port an annotation
// entry also claims, differently, is an error naming both. The merged list
// is held to lim. Linear in the number of mappings.
func MergeMappings(ann, cri []hcn.PortMapping, lim Limits) ([]hcn.PortMapping, error) {
	out := append(make([]hcn.PortMapping, 0, len(ann)+len(cri)), ann...)
	idx := newOverlapIndex(len(ann) + len(cri))
	for i, a := range out {
		idx.add(i, a)
	}
	for _, c := range cri {
		if j := idx.first(c); j >= 0 {
			if out[j] == c {
				continue // given by both sources: once
			}
			return nil, &MappingError{Entry: fmt.Sprintf("CRI hostPort %q", c.String()),
				Reason: fmt.Sprintf("conflicts with %q (annotation %s and Kubernetes hostPort disagree)", out[j].String(), AnnotationPortMappings)}
		}
		idx.add(len(out), c)
		out = append(out, c)
	}
	if err := lim.checkCount(len(out)); err != nil {
		return nil, fmt.Errorf("annotation and CRI hostPorts together: %w", err)
	}
	return out, nil
}
