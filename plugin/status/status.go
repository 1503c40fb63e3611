// Package status builds the table `nri-hcn-portmap status` prints: every
// endpoint the plugin manages, with its pod's name from containerd and its
// state (attached, detached, orphaned), and, from the running plugin, who
// maps each of a pod's host ports (the plugin, or the CNI's endpoint).
package status

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/hostsockets"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

// Entry is one managed endpoint as `nri-hcn-portmap status` shows it.
type Entry struct {
	Pod       string                  `json:"pod,omitempty"`
	Namespace string                  `json:"namespace,omitempty"`
	Sandbox   string                  `json:"sandbox"`
	Endpoint  string                  `json:"endpoint"`
	Name      string                  `json:"name"`
	NetNS     hcn.GUID                `json:"netns"`
	IPAddress string                  `json:"ip,omitempty"`
	State     string                  `json:"state"`
	Mappings  []hcn.PortMappingPolicy `json:"mappings"` // what our endpoint maps
	// CNI: the pod's host ports the CNI's endpoint maps (from the running
	// plugin; none when it does not answer).
	CNI []plugin.CNIMapping `json:"cni,omitempty"`
	// ForeignDNS: our endpoint carries DNS other than the pod's (from the
	// running plugin: plugin.SandboxMappings.ForeignDNS)
	ForeignDNS bool `json:"foreignDNS,omitempty"`
	// Shadows: programs of the node holding a host port our endpoint maps
	// (bound after the pod was mapped): the mapping takes their traffic
	Shadows []Shadowed `json:"shadows,omitempty"`
}

// Shadowed is a program of the node a mapping of ours shadows.
type Shadowed struct {
	Mapping hcn.PortMappingPolicy `json:"mapping"`
	Socket  string                `json:"socket"` // the program, its PID, where it is bound
}

// WithShadowed marks each of our mappings a socket of socks (the node's
// own, on our mappings' ports) holds.
func WithShadowed(entries []Entry, socks []hostsockets.Socket) []Entry {
	for i := range entries {
		for _, p := range entries[i].Mappings {
			if s, held := hostsockets.Holding(socks, p); held {
				entries[i].Shadows = append(entries[i].Shadows, Shadowed{Mapping: p, Socket: s.String()})
			}
		}
	}
	return entries
}

// Mapped is every mapping our endpoints of entries hold.
func Mapped(entries []Entry) []hcn.PortMappingPolicy {
	var out []hcn.PortMappingPolicy
	for _, e := range entries {
		out = append(out, e.Mappings...)
	}
	return out
}

// WithCNI adds to entries what the running plugin says the CNI maps of
// each sandbox's host ports, and whose endpoint carries DNS other than the
// pod's; a sandbox whose ports the CNI maps all gets an entry of its own
// (state "cni", no endpoint of ours).
func WithCNI(entries []Entry, views []plugin.SandboxMappings) []Entry {
	at := map[string]int{}
	for i, e := range entries {
		at[e.Sandbox] = i
	}
	for _, v := range views {
		if i, ok := at[v.Sandbox]; ok {
			entries[i].CNI, entries[i].ForeignDNS = v.CNI, v.ForeignDNS
			continue
		}
		if len(v.CNI) == 0 {
			continue
		}
		ns, name, _ := strings.Cut(v.Pod, "/")
		entries = append(entries, Entry{Pod: name, Namespace: ns, Sandbox: v.Sandbox, Endpoint: "-", State: "cni",
			Mappings: []hcn.PortMappingPolicy{}, CNI: v.CNI})
	}
	sortEntries(entries)
	return entries
}

// Entries turns our endpoints into status entries. With a store, the
// pod's name and namespace come from containerd, and an endpoint whose
// sandbox containerd no longer has is marked orphaned (the next resync
// deletes it).
func Entries(ctx context.Context, mgr *hcn.Manager, store plugin.SandboxStore, eps []hcn.Endpoint) []Entry {
	out := make([]Entry, 0, len(eps))
	for _, ep := range eps {
		id, _ := mgr.SandboxID(ep.Name)
		state := "attached"
		if ep.Namespace == "" {
			state = "detached"
		}
		m := ep.PortMappings
		if m == nil {
			m = []hcn.PortMappingPolicy{}
		}
		e := Entry{Sandbox: id, Endpoint: ep.ID, Name: ep.Name, NetNS: ep.Namespace,
			IPAddress: ep.IPAddress, State: state, Mappings: m}
		if store != nil {
			sb, err := store.Sandbox(ctx, id)
			switch {
			case errors.Is(err, plugin.ErrSandboxNotFound):
				e.State = "orphaned"
			case err == nil && len(sb.Metadata) > 0:
				if md, err := request.DecodeCRIMetadata(sb.Metadata); err == nil {
					e.Pod, e.Namespace = md.PodName, md.PodNamespace
				}
			}
		}
		out = append(out, e)
	}
	sortEntries(out)
	return out
}

// sortEntries orders by namespace and pod, then sandbox: the same order
// every run.
func sortEntries(out []Entry) {
	slices.SortFunc(out, func(a, b Entry) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.Sandbox, b.Sandbox), cmp.Compare(a.Endpoint, b.Endpoint))
	})
}

// Write writes entries as a table or as JSON ("table" or "json").
func Write(w io.Writer, entries []Entry, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(entries)
	case "table", "":
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAMESPACE\tPOD\tSANDBOX\tENDPOINT\tIP\tSTATE\tMAPPINGS (host -> container, by whom)")
		for _, e := range entries {
			ms := make([]string, 0, len(e.Mappings)+len(e.CNI))
			var plain []hcn.PortMappingPolicy // ranges said as one
			for _, p := range e.Mappings {
				if i := slices.IndexFunc(e.Shadows, func(sh Shadowed) bool { return sh.Mapping == p }); i >= 0 {
					ms = append(ms, p.String()+" (shadows "+e.Shadows[i].Socket+")")
				} else {
					plain = append(plain, p)
				}
			}
			ms = append(hcn.Runs(plain), ms...)
			for _, m := range e.CNI {
				ms = append(ms, m.Policy.String()+" ("+strings.Join(append([]string{"cni " + short(m.Endpoint, 8)}, m.Said()...), ", ")+")")
			}
			state := e.State
			if e.ForeignDNS {
				state += " (node's DNS until its next sandbox)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", orDash(e.Namespace), orDash(e.Pod), short(e.Sandbox, 13), e.Endpoint,
				orDash(e.IPAddress), state, strings.Join(ms, ", "))
		}
		return tw.Flush()
	}
	return fmt.Errorf("output format %q: want table or json", format)
}

func short(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
