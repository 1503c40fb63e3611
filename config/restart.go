package config

import (
	"reflect"
	"slices"
)

// RestartNeeded names the sections whose changes from c to next take effect
// only after a restart: everything but [admission], which a reload applies
// to new pods.
func (c Config) RestartNeeded(next Config) []string {
	var out []string
	changed := func(name string, same bool) {
		if !same {
			out = append(out, "["+name+"]")
		}
	}
	changed("admin", c.Admin == next.Admin)
	changed("containerd", c.Containerd == next.Containerd)
	changed("hcn", c.HCN.sameAs(next.HCN))
	changed("hyperv", c.HyperV == next.HyperV)
	changed("kubernetes", c.Kubernetes == next.Kubernetes)
	changed("log", c.Log == next.Log)
	changed("nri", c.NRI == next.NRI)
	changed("plugin", c.Plugin.sameAs(next.Plugin))
	// the NetworkPolicy cache runs, or not, as the plugin started
	if c.Admission.NetworkPolicy != next.Admission.NetworkPolicy {
		out = append(out, "admission.network_policy")
	}
	return out
}

// sameAs compares every field (a test holds it to the struct's fields).
func (p Plugin) sameAs(q Plugin) bool {
	return p.Source == q.Source && p.ResyncInterval == q.ResyncInterval && slices.Equal(p.MappingSources, q.MappingSources) &&
		p.FailurePolicy == q.FailurePolicy && p.Deadline == q.Deadline && p.MaxMappingsPerPod == q.MaxMappingsPerPod &&
		p.MaxAnnotationBytes == q.MaxAnnotationBytes && p.ShutdownGrace == q.ShutdownGrace &&
		slices.Equal(p.HyperVRuntimeHandlers, q.HyperVRuntimeHandlers)
}

// sameAs compares every field (a test holds it to the struct's fields).
func (h HCN) sameAs(g HCN) bool {
	a, b := h, g
	a.ClusterRanges, b.ClusterRanges = nil, nil
	return reflect.DeepEqual(a, b) && slices.Equal(h.ClusterRanges, g.ClusterRanges)
}
