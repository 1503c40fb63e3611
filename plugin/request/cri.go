package request

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// ExtensionMetadata is the containerd container extension in which
// containerd's CRI stores a sandbox's metadata.
const ExtensionMetadata = "io.cri-containerd.sandbox.metadata"

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
	RawPortMappings       []*runtimeapi.PortMapping // as stored; see HostPorts
	NetNSPath             string
	RuntimeHandler        string // the CRI runtime handler the pod asked for
	// DNS is the pod's DNS configuration (kubelet's: the cluster's
	// resolvers and search list), zero when the record has none.
	DNS hcn.DNS
	// CNIDNS is the DNS the CNI reported for the pod's interface (the
	// record's CNIResult), zero when it reported none.
	CNIDNS hcn.DNS
}

// criMetadataJSON is containerd's versioned sandbox metadata (the envelope
// type is internal to containerd): {"Version":"v1","Metadata":{ID,Name,
// Config,...}}, where Config is the CRI PodSandboxConfig as encoding/json
// writes it (enums as numbers, zero values omitted), so it decodes into the
// cri-api type itself.
type criMetadataJSON struct {
	Version  string
	Metadata *struct {
		ID             string
		Name           string
		NetNSPath      string
		RuntimeHandler string
		Config         *runtimeapi.PodSandboxConfig
		// CNIResult is go-cni's Result as encoding/json writes it (the
		// same in containerd 1.7, go-cni v1.1.9, and 2.x, v1.1.14): its
		// DNS is one entry per network the CNI set up (an empty one where
		// it reported none), in the CNI spec's types.DNS
		CNIResult *struct {
			DNS []struct {
				Nameservers []string `json:"nameservers"`
				Domain      string   `json:"domain"`
				Search      []string `json:"search"`
				Options     []string `json:"options"`
			}
		}
	}
}

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
	out := &CRIMetadata{ID: md.ID, Name: md.Name, NetNSPath: md.NetNSPath, RuntimeHandler: md.RuntimeHandler, Annotations: cfg.GetAnnotations(),
		Labels: cfg.GetLabels(), RawPortMappings: cfg.GetPortMappings()}
	if pm := cfg.GetMetadata(); pm != nil {
		out.PodName, out.PodNamespace, out.PodUID = pm.GetName(), pm.GetNamespace(), pm.GetUid()
	}
	if d := cfg.GetDnsConfig(); d != nil {
		// the suffix of the pod's interface (Domain) is its first search
		// domain: kubelet lists the pod's namespace's service domain
		// first (<ns>.svc.<cluster domain>), the one a single-label name
		// is tried in first, as a Linux pod's resolv.conf does; sent
		// empty, HNS fills in the node's suffix (hcsshim#2369)
		out.DNS = hcn.DNS{ServerList: slices.Clone(d.GetServers()), Search: slices.Clone(d.GetSearches()), Options: slices.Clone(d.GetOptions())}
		if len(out.DNS.Search) > 0 {
			out.DNS.Domain = out.DNS.Search[0]
		}
	}
	if r := md.CNIResult; r != nil {
		// the first network whose result has resolvers: what the pod's
		// interface was given; its suffix is the first search domain, as
		// for the pod's own, else the domain the CNI named. Empty entries
		// are dropped: win-bridge through HNS v1 splits an endpoint's empty
		// DNSServerList and DNSSuffix on "," (containernetworking/plugins
		// pkg/hns ConstructResult)
		for _, d := range r.DNS {
			servers := nonEmpty(d.Nameservers)
			if len(servers) == 0 {
				continue
			}
			out.CNIDNS = hcn.DNS{ServerList: servers, Search: nonEmpty(d.Search), Options: nonEmpty(d.Options), Domain: d.Domain}
			if len(out.CNIDNS.Search) > 0 {
				out.CNIDNS.Domain = out.CNIDNS.Search[0]
			}
			break
		}
	}
	return out, nil
}

// HostPorts returns the Kubernetes hostPort mappings, skipping entries
// without a host port (containerd skips them too). A mapping HNS cannot
// honour is an error that names it; more host ports than lim allows is an
// error before any is converted.
func (md *CRIMetadata) HostPorts(lim Limits) ([]PortMapping, error) {
	n := 0
	for _, pm := range md.RawPortMappings {
		if pm.GetHostPort() != 0 {
			n++
		}
	}
	if err := lim.checkCount(n); err != nil {
		return nil, fmt.Errorf("CRI hostPorts: %w", err)
	}
	out := make([]PortMapping, 0, n)
	for i, pm := range md.RawPortMappings {
		if pm.GetHostPort() == 0 {
			continue
		}
		mapping, reason := criMapping(pm)
		if reason != "" {
			return nil, &MappingError{Entry: fmt.Sprintf("CRI port_mappings[%d] (%s)", i, criString(pm)), Reason: reason}
		}
		out = append(out, mapping)
	}
	if err := CheckOverlaps(out, func(i int) string { return fmt.Sprintf("CRI hostPort %q", out[i].String()) }); err != nil {
		return nil, err
	}
	return out, nil
}

func criString(pm *runtimeapi.PortMapping) string {
	s := fmt.Sprintf("hostPort %d -> containerPort %d protocol %d", pm.GetHostPort(), pm.GetContainerPort(), int32(pm.GetProtocol()))
	if pm.GetHostIp() != "" {
		s += " hostIP " + pm.GetHostIp()
	}
	return s
}

func criMapping(pm *runtimeapi.PortMapping) (PortMapping, string) {
	var m PortMapping
	switch pm.GetProtocol() {
	case runtimeapi.Protocol_TCP:
		m.Protocol = hcn.TCP
	case runtimeapi.Protocol_UDP:
		m.Protocol = hcn.UDP
	case runtimeapi.Protocol_SCTP:
		return m, "protocol SCTP is not supported by HNS port mappings (only TCP and UDP)"
	default:
		return m, fmt.Sprintf("unknown CRI protocol %d", int32(pm.GetProtocol()))
	}
	var reason string
	if m.HostPort, reason = checkPort("hostPort", int(pm.GetHostPort())); reason != "" {
		return m, reason
	}
	if m.ContainerPort, reason = checkPort("containerPort", int(pm.GetContainerPort())); reason != "" {
		return m, reason
	}
	if pm.GetHostIp() != "" {
		if m.HostIP, reason = parseHostIP(pm.GetHostIp()); reason != "" {
			return m, reason
		}
	}
	return m, ""
}

// nonEmpty is s without its empty strings (nil when none is left).
func nonEmpty(s []string) []string {
	var out []string
	for _, v := range s {
		if v != "" {
			out = append(out, v)
		}
	}
	return out
}
