package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// queueMetrics is client-go's workqueue metrics (as component-base's
// workqueue provider names them: depth, adds, queue and work durations,
// unfinished work, the longest running processor, retries) with the
// plugin's prefix, in the plugin's registry. The plugin has one queue, so
// the queue's name is not a label.
type queueMetrics struct{ reg *prometheus.Registry }

var _ workqueue.MetricsProvider = queueMetrics{}

// durations from 1 µs to about 16 min, as client-go's provider buckets
// them from 10 ns
var queueBuckets = prometheus.ExponentialBuckets(1e-6, 4, 16)

func (q queueMetrics) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "nri_hcn_portmap_workqueue_" + name, Help: help})
	q.reg.MustRegister(g)
	return g
}

func (q queueMetrics) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "nri_hcn_portmap_workqueue_" + name, Help: help})
	q.reg.MustRegister(c)
	return c
}

func (q queueMetrics) histogram(name, help string) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "nri_hcn_portmap_workqueue_" + name, Help: help, Buckets: queueBuckets})
	q.reg.MustRegister(h)
	return h
}

func (q queueMetrics) NewDepthMetric(string) workqueue.GaugeMetric {
	return q.gauge("depth", "Sandboxes waiting in the work queue.")
}

func (q queueMetrics) NewAddsMetric(string) workqueue.CounterMetric {
	return q.counter("adds_total", "Sandboxes added to the work queue.")
}

func (q queueMetrics) NewLatencyMetric(string) workqueue.HistogramMetric {
	return q.histogram("queue_duration_seconds", "How long a sandbox waits in the work queue before its sync.")
}

func (q queueMetrics) NewWorkDurationMetric(string) workqueue.HistogramMetric {
	return q.histogram("work_duration_seconds", "How long one sync takes.")
}

func (q queueMetrics) NewUnfinishedWorkSecondsMetric(string) workqueue.SettableGaugeMetric {
	return q.gauge("unfinished_work_seconds", "Seconds of work in progress not yet observed by work_duration: large values mean stuck syncs.")
}

func (q queueMetrics) NewLongestRunningProcessorSecondsMetric(string) workqueue.SettableGaugeMetric {
	return q.gauge("longest_running_processor_seconds", "How long the longest running sync has run.")
}

func (q queueMetrics) NewRetriesMetric(string) workqueue.CounterMetric {
	return q.counter("retries_total", "Syncs put back in the work queue to be retried.")
}
