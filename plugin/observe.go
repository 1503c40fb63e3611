package plugin

import (
	"time"

	"k8s.io/client-go/util/workqueue"
)

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
	// Mapped: a pod's host ports were first in place d after its start
	// was seen, on path (PathNRI, PathEvents).
	Mapped(path string, d time.Duration)
	// QueueMetrics is the work queue's metrics provider (nil: none).
	QueueMetrics() workqueue.MetricsProvider
}

// Paths a pod's start comes by (Observer.Mapped).
const (
	PathNRI    = "nri"    // RunPodSandbox
	PathEvents = "events" // containerd's /tasks/start
)

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
func (nopObserver) Mapped(string, time.Duration)          {}
func (nopObserver) QueueMetrics() workqueue.MetricsProvider {
	return nil
}

// noQueueMetrics is a queue without metrics (client-go's own no-op is not
// exported; its global provider is not used).
type noQueueMetrics struct{}

type noMetric struct{}

func (noMetric) Inc()            {}
func (noMetric) Dec()            {}
func (noMetric) Set(float64)     {}
func (noMetric) Observe(float64) {}

func (noQueueMetrics) NewDepthMetric(string) workqueue.GaugeMetric            { return noMetric{} }
func (noQueueMetrics) NewAddsMetric(string) workqueue.CounterMetric           { return noMetric{} }
func (noQueueMetrics) NewLatencyMetric(string) workqueue.HistogramMetric      { return noMetric{} }
func (noQueueMetrics) NewWorkDurationMetric(string) workqueue.HistogramMetric { return noMetric{} }
func (noQueueMetrics) NewUnfinishedWorkSecondsMetric(string) workqueue.SettableGaugeMetric {
	return noMetric{}
}
func (noQueueMetrics) NewLongestRunningProcessorSecondsMetric(string) workqueue.SettableGaugeMetric {
	return noMetric{}
}
func (noQueueMetrics) NewRetriesMetric(string) workqueue.CounterMetric { return noMetric{} }
