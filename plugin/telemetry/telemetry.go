// Package telemetry exports the plugin's Prometheus metrics. Every Metrics
// has its own registry: no global state.
package telemetry

import (
	"net/http"
	"runtime"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/util/workqueue"
)

// Metrics implements plugin.Observer.
type Metrics struct {
	reg        *prometheus.Registry
	operations *prometheus.CounterVec
	hcnCalls   *prometheus.HistogramVec
	hcnErrors  *prometheus.CounterVec
	reconciles *prometheus.CounterVec
	repairs    *prometheus.CounterVec
	reconnects *prometheus.CounterVec
	reloads    *prometheus.CounterVec
	source     *prometheus.GaugeVec
	nri        *prometheus.GaugeVec
	skipped    *prometheus.CounterVec
	kube       *prometheus.CounterVec
	kubeDrop   prometheus.Counter
	kubeUp     prometheus.Gauge
	nsSynced   prometheus.Gauge
	npSynced   prometheus.Gauge
	mapped     *prometheus.HistogramVec
	// kubeUpRegistered: the gauge is there only with kubernetes.enabled
	kubeUpRegistered bool
}

// New registers the metrics (the endpoint gauge comes with CountEndpoints);
// version and revision are the build's, for nri_hcn_portmap_build_info.
func New(version, revision string) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	f := func(c prometheus.Collector) { m.reg.MustRegister(c) }
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nri_hcn_portmap_build_info",
		Help: "Always 1: the plugin's version, the commit it was built from and the Go version it was built with."},
		[]string{"version", "revision", "goversion"})
	build.WithLabelValues(version, revision, runtime.Version()).Set(1)
	f(build)
	m.operations = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nri_hcn_portmap_operations_total",
		Help: "Pod operations by kind (start, stop, event-start, event-stop) and result (ok, error, invalid, hyperv, denied, conflict, deadline)."},
		[]string{"kind", "result"})
	m.hcnCalls = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "nri_hcn_portmap_hcn_call_duration_seconds",
		Help: "Latency of HNS calls.", Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}},
		[]string{"call"})
	m.hcnErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nri_hcn_portmap_hcn_call_errors_total",
		Help: "HNS calls that failed."}, []string{"call"})
	m.reconciles = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nri_hcn_portmap_reconcile_runs_total",
		Help: "Reconcile runs by trigger (synchronize, subscribed, periodic)."}, []string{"trigger"})
	m.repairs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nri_hcn_portmap_reconcile_repairs_total",
		Help: "Endpoints a reconcile created or deleted, and sandboxes it failed on."}, []string{"action"})
	m.reconnects = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nri_hcn_portmap_event_source_reconnects_total",
		Help: "Reconnections of an event source after its connection broke."}, []string{"source"})
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nri_hcn_portmap_config_reloads_total",
		Help: "Configuration reloads by result (applied, rejected)."}, []string{"result"})
	m.source = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nri_hcn_portmap_event_source_info",
		Help: "1 for the event source the plugin chose (nri or containerd)."}, []string{"source"})
	m.nri = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nri_hcn_portmap_nri_registered",
		Help: "1 while registered with the NRI runtime, by the name the runtime knows the plugin by (<index>-<name>) and mode (launched by the runtime, or external)."},
		[]string{"plugin", "mode"})
	m.skipped = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nri_hcn_portmap_skipped_total",
		Help: "Pods or host ports left alone, by reason (no-windows-namespace: a Linux or HostProcess sandbox; mapped-by-cni: the CNI's endpoint maps the host port; cni-mapping-ineffective: it maps it in a way known not to work)."}, []string{"reason"})
	m.kube = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nri_hcn_portmap_kubernetes_reports_total",
		Help: "Reports to the API server: what (event, condition) and result (sent, failed, skipped: another node's or another pod of that name)."},
		[]string{"what", "result"})
	m.kubeDrop = prometheus.NewCounter(prometheus.CounterOpts{Name: "nri_hcn_portmap_kubernetes_reports_dropped_total",
		Help: "Reports dropped because the queue to the API server was full (the oldest goes)."})
	m.kubeUp = prometheus.NewGauge(prometheus.GaugeOpts{Name: "nri_hcn_portmap_kubernetes_reporter_up",
		Help: "With kubernetes.enabled: 1 when the reporter runs, 0 when it could not be built (no API server configuration); ports are mapped either way."})
	m.npSynced = prometheus.NewGauge(prometheus.GaugeOpts{Name: "nri_hcn_portmap_kubernetes_network_policies_synced",
		Help: "With kubernetes.enabled and admission.network_policy other than off: 1 while the NetworkPolicies follow the API server (listed, watched), 0 while not (what was read last stays in force for kubernetes.labels_max_age)."})
	m.nsSynced = prometheus.NewGauge(prometheus.GaugeOpts{Name: "nri_hcn_portmap_kubernetes_namespaces_synced",
		Help: "With kubernetes.enabled: 1 while the namespaces' labels (their Pod Security levels) are listed and watched, 0 while not (annotations in namespaces never read wait)."})
	m.mapped = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "nri_hcn_portmap_start_to_mapped_seconds",
		Help:    "From a pod's start seen (path nri: RunPodSandbox; events: containerd's /tasks/start) to its host ports in place.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}, []string{"path"})
	for _, c := range []prometheus.Collector{m.kube, m.kubeDrop, m.skipped, m.nri, m.source, m.operations, m.hcnCalls, m.hcnErrors, m.reconciles, m.repairs, m.reconnects, m.reloads, m.mapped} {
		f(c)
	}
	return m
}

// CountEndpoints registers the gauge of the endpoints the plugin manages,
// read from count at every scrape.
func (m *Metrics) CountEndpoints(count func() int) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "nri_hcn_portmap_endpoints_managed",
		Help: "HCN endpoints the plugin manages."}, func() float64 { return float64(count()) }))
}

// CountForeignDNS registers the gauge of the pods whose endpoint carries
// DNS other than the pod's, read from count at every scrape.
func (m *Metrics) CountForeignDNS(count func() int) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "nri_hcn_portmap_pods_foreign_dns",
		Help: "Pods whose endpoint carries DNS other than the pod's (built by an earlier release, which sent none, so HNS filled in the node's): kept so that their host ports do not drop; each pod's next sandbox gets its own (status names them)."},
		func() float64 { return float64(count()) }))
}

// WatchSource registers the gauge of whether the event source is live
// (registered with NRI, or subscribed to containerd's events), read from
// up at every scrape.
func (m *Metrics) WatchSource(up func() bool) {
	m.boolGauge("nri_hcn_portmap_event_source_up",
		"1 while the event source is live (registered with the NRI runtime, or subscribed to containerd's events): pods are followed; 0 while not.", up)
}

// WatchNamespaces registers the gauge saying whether the namespaces'
// labels are too old to grant host ports (kubernetes.labels_max_age
// passed while the API server was not read), read at every scrape.
func (m *Metrics) WatchNamespaces(stale func() bool) {
	m.boolGauge("nri_hcn_portmap_kubernetes_namespaces_stale",
		"With kubernetes.enabled: 1 while the namespaces' labels were last read longer ago than kubernetes.labels_max_age (the API server not reached): new annotations are held back; 0 otherwise.", stale)
}

// CountFailing registers the gauge of the pods whose mappings fail now, by
// reason, read from count at every scrape; every one of reasons has its
// series from the start (0 while no pod fails with it), so a dashboard and
// an alert see zero, not no data.
func (m *Metrics) CountFailing(reasons []string, count func() map[string]int) {
	m.reg.MustRegister(&failing{reasons: reasons, count: count, desc: prometheus.NewDesc("nri_hcn_portmap_pods_failing",
		"Pods whose host ports are not mapped now, by the reason their owners are told (HostPortDenied, HostPortConflict, PodSecurityForbidsHostPorts, HNSError, ...).",
		[]string{"reason"}, nil)})
}

// failing is the pods_failing gauge, read at each scrape.
type failing struct {
	reasons []string
	count   func() map[string]int
	desc    *prometheus.Desc
}

func (f *failing) Describe(ch chan<- *prometheus.Desc) { ch <- f.desc }

func (f *failing) Collect(ch chan<- prometheus.Metric) {
	counts := f.count()
	for _, reason := range f.reasons {
		ch <- prometheus.MustNewConstMetric(f.desc, prometheus.GaugeValue, float64(counts[reason]), reason)
	}
	for reason, n := range counts {
		if !slices.Contains(f.reasons, reason) {
			ch <- prometheus.MustNewConstMetric(f.desc, prometheus.GaugeValue, float64(n), reason)
		}
	}
}

// Handler serves /metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Operation implements plugin.Observer.
func (m *Metrics) Operation(kind, result string) { m.operations.WithLabelValues(kind, result).Inc() }

// Mapped implements plugin.Observer.
func (m *Metrics) Mapped(path string, d time.Duration) {
	m.mapped.WithLabelValues(path).Observe(d.Seconds())
}

// QueueMetrics implements plugin.Observer: the work queue's metrics,
// client-go's set under the plugin's name.
func (m *Metrics) QueueMetrics() workqueue.MetricsProvider { return queueMetrics{m.reg} }

// Reconciled implements plugin.Observer.
func (m *Metrics) Reconciled(trigger string, created, deleted, _, failed int) {
	m.reconciles.WithLabelValues(trigger).Inc()
	m.repairs.WithLabelValues("created").Add(float64(created))
	m.repairs.WithLabelValues("deleted").Add(float64(deleted))
	m.repairs.WithLabelValues("failed").Add(float64(failed))
}

// Reconnected implements plugin.Observer.
func (m *Metrics) Reconnected(source string) { m.reconnects.WithLabelValues(source).Inc() }

// HCNCall implements plugin.Observer.
func (m *Metrics) HCNCall(call string, d time.Duration, err error) {
	m.hcnCalls.WithLabelValues(call).Observe(d.Seconds())
	if err != nil {
		m.hcnErrors.WithLabelValues(call).Inc()
	}
}

// SourceChosen records the event source the plugin runs.
func (m *Metrics) SourceChosen(source string) {
	m.source.Reset()
	m.source.WithLabelValues(source).Set(1)
}

// NRIRegistered records the NRI registration: plugin is <index>-<name>,
// mode launched or external, and on whether it holds now.
func (m *Metrics) NRIRegistered(plugin, mode string, on bool) {
	v := 0.0
	if on {
		v = 1
	}
	m.nri.WithLabelValues(plugin, mode).Set(v)
}

// KubeReport counts a report to the API server.
func (m *Metrics) KubeReport(what, result string) { m.kube.WithLabelValues(what, result).Inc() }

// KubeReporter records whether the Kubernetes reporter runs.
func (m *Metrics) KubeReporter(up bool) {
	if !m.kubeUpRegistered {
		m.reg.MustRegister(m.kubeUp, m.nsSynced, m.npSynced)
		m.kubeUpRegistered = true
	}
	v := 0.0
	if up {
		v = 1
	}
	m.kubeUp.Set(v)
}

// NamespacesSynced records whether the namespaces' labels are current.
func (m *Metrics) NamespacesSynced(synced bool) {
	v := 0.0
	if synced {
		v = 1
	}
	m.nsSynced.Set(v)
}

// NetworkPoliciesSynced records whether the NetworkPolicies are current.
func (m *Metrics) NetworkPoliciesSynced(synced bool) {
	v := 0.0
	if synced {
		v = 1
	}
	m.npSynced.Set(v)
}

// WatchNetworkPolicies registers the gauge saying whether the
// NetworkPolicies are too old to grant host ports, read at every scrape.
func (m *Metrics) WatchNetworkPolicies(stale func() bool) {
	m.boolGauge("nri_hcn_portmap_kubernetes_network_policies_stale",
		"With kubernetes.enabled and admission.network_policy other than off: 1 while the NetworkPolicies (or the policy kinds served) were last read longer ago than kubernetes.labels_max_age: no host port is mapped, those in place are removed; 0 otherwise.", stale)
}

// boolGauge registers a gauge read from f at every scrape: 1 while f
// says true, 0 otherwise.
func (m *Metrics) boolGauge(name, help string, f func() bool) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
		if f() {
			return 1
		}
		return 0
	}))
}

// KubeDropped counts a report dropped from a full queue.
func (m *Metrics) KubeDropped() { m.kubeDrop.Inc() }

// Skipped implements plugin.Observer.
func (m *Metrics) Skipped(reason string) { m.skipped.WithLabelValues(reason).Inc() }

// Reloaded counts a configuration reload.
func (m *Metrics) Reloaded(applied bool) {
	if applied {
		m.reloads.WithLabelValues("applied").Inc()
	} else {
		m.reloads.WithLabelValues("rejected").Inc()
	}
}
