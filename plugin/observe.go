package plugin

import "time"

// Observer is told what the plugin does, for metrics. Implementations must
// be safe for concurrent use.
type Observer interface {
	// Operation: kind is start, stop, event-start or event-stop; result
	// is one of the Change* strings.
	Operation(kind, result string)
	// Reconciled: trigger is synchronize, subscribed or periodic.
	Reconciled(trigger string, created, deleted, unchanged, failed int)
	// Reconnected: source is nri or containerd.
	Reconnected(source string)
	// HCNCall: one HNS call and how it went.
	HCNCall(call string, d time.Duration, err error)
	// Skipped: a pod with mappings was left alone for reason (SkipNoNetNS).
	Skipped(reason string)
}

// Reasons a pod's host port is left alone (Observer.Skipped).
const (
	// SkipNoNetNS: the sandbox has no Windows network namespace (a Linux
	// or HostProcess sandbox): there is nothing to attach an endpoint to.
	SkipNoNetNS = "no-windows-namespace"
	// SkipMappedByCNI: the CNI's endpoint in the pod's namespace maps the
	// host port already.
	SkipMappedByCNI = "mapped-by-cni"
	// SkipCNIIneffective: the CNI's endpoint maps it in a way known not to
	// work (reported to the pod's owners).
	SkipCNIIneffective = "cni-mapping-ineffective"
	// SkipCRIRecordUnreadable: containerd's CRI record of the sandbox does
	// not decode: its hostPorts are not known (the pod is not failed for
	// it; its annotation is still mapped).
	SkipCRIRecordUnreadable = "cri-record-unreadable"
)

// Operation results.
const (
	ClassOK       = "ok"
	ClassError    = "error"
	ClassInvalid  = "invalid"
	ClassHyperV   = "hyperv" // an invalid request: a Hyper-V pod with host ports
	ClassDenied   = "denied"
	ClassConflict = "conflict"
	ClassDeadline = "deadline"
)

type nopObserver struct{}

func (nopObserver) Operation(string, string)              {}
func (nopObserver) Reconciled(string, int, int, int, int) {}
func (nopObserver) Reconnected(string)                    {}
func (nopObserver) HCNCall(string, time.Duration, error)  {}
func (nopObserver) Skipped(string)                        {}
