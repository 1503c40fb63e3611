package plugin

import (
	"fmt"
	"strings"
)

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
