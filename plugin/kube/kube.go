// Package kube tells a pod's owners what became of its host ports, where
// they look (kubectl describe pod): an events.k8s.io event on the pod, and
// the pod condition
// hcn.nri.io/port-mappings-ready, which a pod can list in its
// readinessGates. The API server is never on the path of HCN work: reports
// wait in a bounded workqueue keyed by pod (the oldest dropped when it is
// full) for one worker that retries them.
package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/backoff"

	"unicode/utf8"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
)

// ConditionType is the pod condition the plugin writes.
const ConditionType corev1.PodConditionType = "hcn.nri.io/port-mappings-ready"

// Event reasons and the reporting controller.
const (
	ReasonMapped = "PortsMapped"
	ReasonFailed = "PortMappingFailed"
	// ConfigSourceAnnotation is kubelet's: where a pod came from ("api",
	// or "file" and "http" for a static pod).
	ConfigSourceAnnotation = plugin.AnnotationConfigSource
	Controller             = "hcn.nri.io/nri-hcn-portmap"
	Action                 = "MapHostPorts"
)

// Metrics counts what the reporter does.
type Metrics interface {
	KubeReport(what, result string) // what: event, condition; result: sent, failed, skipped
	KubeDropped()                   // a report dropped from a full queue
}

// Options configure a Reporter.
type Options struct {
	API       API
	Node      string // reports only for pods of this node
	QueueSize int    // kubernetes.queue_size
	Metrics   Metrics
	Log       *logrus.Entry
	// RetryMin and RetryMax bound the wait between tries of a report
	// (config.APIRetryMin, config.APIRetryMax).
	RetryMin, RetryMax time.Duration
}

// item is a pod's report waiting to be sent.
type item struct {
	rep       plugin.PodReport
	seq       uint64 // its place in arrival order (the oldest is dropped first)
	eventSent bool   // a retry after a failed condition patch does not repeat the event
}

// Reporter implements plugin.Reporter against the API server. Reports wait
// in a workqueue keyed by pod, as the core's work does: a pod's newer
// report replaces the one waiting, one worker sends them, and a failed one
// is put back rate-limited, its tries counted by the queue.
type Reporter struct {
	opt Options
	q   workqueue.TypedRateLimitingInterface[string]

	mu      sync.Mutex
	pending map[string]*item      // namespace/name -> the report to send
	seq     uint64                // arrivals so far
	last    map[string]string     // namespace/name -> the last state reported
	since   map[string]transition // namespace/name -> its condition's status and transition time, as last set
}

var _ plugin.Reporter = (*Reporter)(nil)

// New returns a Reporter; Run makes it work.
func New(o Options) *Reporter {
	lim := backoff.QueueLimiter(o.RetryMin, max(o.RetryMax, o.RetryMin))
	q := workqueue.NewTypedRateLimitingQueueWithConfig(lim, workqueue.TypedRateLimitingQueueConfig[string]{Name: "nri-hcn-portmap-kubernetes"})
	return &Reporter{opt: o, q: q, pending: map[string]*item{}, last: map[string]string{}, since: map[string]transition{}}
}

// Report implements plugin.Reporter: it queues and returns at once. What
// was already reported for the pod is not queued again (every resync
// reports each mapped pod; a full queue must not drop news for repeats); a
// newer report of a pod replaces the one waiting; a full queue drops its
// oldest report.
func (r *Reporter) Report(rep plugin.PodReport) {
	key := reportKey(rep)
	r.mu.Lock()
	if r.last[key] == state(rep) {
		r.mu.Unlock()
		return
	}
	dropped := false
	if _, waiting := r.pending[key]; !waiting && len(r.pending) >= r.opt.QueueSize {
		oldest := ""
		for k, it := range r.pending {
			if oldest == "" || it.seq < r.pending[oldest].seq {
				oldest = k
			}
		}
		delete(r.pending, oldest) // its key in the queue finds nothing to send
		dropped = true
	}
	r.seq++
	r.pending[key] = &item{rep: rep, seq: r.seq}
	r.mu.Unlock()
	if dropped && r.opt.Metrics != nil {
		r.opt.Metrics.KubeDropped()
	}
	r.q.Add(key)
}

func reportKey(rep plugin.PodReport) string { return rep.Pod.Namespace + "/" + rep.Pod.Name }

// Run sends reports until ctx ends.
func (r *Reporter) Run(ctx context.Context) {
	go func() {
		<-ctx.Done()
		r.q.ShutDown()
	}()
	for {
		key, shutdown := r.q.Get()
		if shutdown {
			return
		}
		r.process(ctx, key)
		r.q.Done(key)
	}
}

// process sends the pod's waiting report: done, put back rate-limited, or
// given up as the table of errors says.
func (r *Reporter) process(ctx context.Context, key string) {
	r.mu.Lock()
	it := r.pending[key]
	r.mu.Unlock()
	if it == nil { // dropped from a full queue, or sent already
		r.q.Forget(key)
		return
	}
	err := r.send(ctx, it)
	attempt := r.q.NumRequeues(key) + 1
	if err != nil && retries(err, attempt) && ctx.Err() == nil {
		r.opt.Log.WithFields(logrus.Fields{"pod": it.rep.Pod.Name, "namespace": it.rep.Pod.Namespace, "attempt": attempt}).
			WithError(err).Warn("reporting to the API server failed; will retry")
		r.q.AddRateLimited(key)
		return
	}
	if err != nil {
		k := kindOf(err)
		r.opt.Log.WithFields(logrus.Fields{"pod": it.rep.Pod.Name, "namespace": it.rep.Pod.Namespace, "attempts": attempt}).
			WithError(err).Log(k.level, k.says)
	}
	r.mu.Lock()
	if r.pending[key] == it { // not replaced by a newer report meanwhile
		delete(r.pending, key)
	}
	r.mu.Unlock()
	r.q.Forget(key)
}

// state is what a report says, to skip saying it twice.
func state(rep plugin.PodReport) string {
	if rep.Mapped {
		return "mapped " + rep.Endpoint + " " + fmt.Sprint(rep.Policies) + " " + fmt.Sprint(rep.CNI)
	}
	return "failed " + rep.Reason + " " + rep.Err.Error()
}

func (r *Reporter) count(what, result string) {
	if r.opt.Metrics != nil {
		r.opt.Metrics.KubeReport(what, result)
	}
}

// send tells the pod's owners: an event regarding the pod, then its
// condition. The pod is named by the CRI record the report came from,
// UID included; nothing is read from the API server (the plugin's token
// has no get on pods): the status patch carries the pod's UID as a
// precondition, so a recreated pod of the same name is never patched, and
// a report without a UID is not sent.
func (r *Reporter) send(ctx context.Context, it *item) error {
	rep := it.rep
	key := reportKey(rep)
	st := state(rep)
	r.mu.Lock()
	same := r.last[key] == st
	r.mu.Unlock()
	if same {
		return nil
	}
	if rep.Pod.UID == "" {
		r.count("event", "skipped") // which pod of that name is not known
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, config.APICallTimeout)
	defer cancel()
	status, reason, msg := corev1.ConditionTrue, ReasonMapped, mappedNote(rep)
	typ, eventReason, note := corev1.EventTypeNormal, ReasonMapped, msg
	if !rep.Mapped {
		status, reason, msg = corev1.ConditionFalse, rep.Reason, rep.Err.Error()
		typ, eventReason, note = corev1.EventTypeWarning, ReasonFailed, rep.Reason+": "+msg
		if who := mappedNote(rep); who != "" { // what does work, and who maps it
			note += " (" + who + ")"
		}
	}
	if !it.eventSent {
		if err := r.opt.API.CreateEvent(cctx, r.event(rep.Pod, typ, eventReason, note)); err != nil {
			r.count("event", "failed")
			if kindOf(err).final {
				r.told(key, st, transition{})
			}
			return err
		}
		it.eventSent = true
		r.count("event", "sent")
	}
	if Static(rep.Pod) {
		// kubelet's own pod: the mirror pod in the API server has
		// another UID than the sandbox's (kubelet's config hash), so the
		// UID precondition cannot name it, and the plugin reads no pod
		r.count("condition", "skipped")
		r.told(key, st, transition{})
		return nil
	}
	since := r.transition(key, status)
	if err := r.patchCondition(cctx, rep.Pod, status, reason, msg, since); err != nil {
		r.count("condition", "failed")
		if kindOf(err).final { // refused for good: told once, not again each resync
			r.told(key, st, transition{})
		}
		return err
	}
	r.count("condition", "sent")
	r.told(key, st, transition{status, since})
	return nil
}

// Static says whether pod is a static pod: one kubelet runs from a file
// (or a URL), whose annotation kubernetes.io/config.source is not "api";
// the API server holds only its mirror pod, of another UID.
func Static(pod plugin.Pod) bool {
	src, ok := pod.Annotations[ConfigSourceAnnotation]
	return ok && src != "api"
}

// told records st as what the pod was last told (a repeat is not sent
// again), and its condition's transition where one was set.
func (r *Reporter) told(key, st string, t transition) {
	r.mu.Lock()
	if len(r.last) >= config.ReportsRemembered {
		clear(r.last)
		clear(r.since)
	}
	r.last[key] = st
	if t.status != "" {
		r.since[key] = t
	}
	r.mu.Unlock()
}

// transition is when the pod's condition last took status: the time this
// reporter first set it so, now when it changes (or was never set here).
type transition struct {
	status corev1.ConditionStatus
	at     metav1.Time
}

func (r *Reporter) transition(key string, status corev1.ConditionStatus) metav1.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.since[key]; ok && t.status == status {
		return t.at
	}
	return metav1.Now()
}

// maxNote is the longest note the API server takes (1 KiB).
const maxNote = 1024

// event is an events.k8s.io/v1 event regarding pod, in the pod's
// namespace, as client-go's recorder makes them (name: the pod's name and
// the time).
func (r *Reporter) event(pod plugin.Pod, typ, reason, note string) *eventsv1.Event {
	now := time.Now()
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", pod.Name, now.UnixNano()), Namespace: pod.Namespace},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: Controller,
		ReportingInstance:   "nri-hcn-portmap-" + r.opt.Node,
		Action:              Action,
		Reason:              reason,
		Regarding:           corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: types.UID(pod.UID)},
		Note:                truncate(note, maxNote),
		Type:                typ,
	}
}

// truncate cuts s to at most n bytes, on a character boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// mappedNote says who maps each of the pod's host ports: the plugin's HNS
// endpoint, the CNI's.
func mappedNote(rep plugin.PodReport) string {
	var parts []string
	if rep.Endpoint != "" {
		parts = append(parts, fmt.Sprintf("host ports mapped by HNS endpoint %s: %s", rep.Endpoint, strings.Join(hcn.Runs(rep.Policies), ", ")))
	}
	byCNI := map[string][]string{}
	var order []string
	for _, m := range rep.CNI {
		if _, ok := byCNI[m.Endpoint]; !ok {
			order = append(order, m.Endpoint)
		}
		byCNI[m.Endpoint] = append(byCNI[m.Endpoint], m.Policy.String()+m.Notes())
	}
	for _, ep := range order {
		parts = append(parts, fmt.Sprintf("mapped by the CNI's endpoint %s: %s", ep, strings.Join(byCNI[ep], ", ")))
	}
	return strings.Join(parts, "; ")
}

// patchCondition sets the pod's condition with a strategic merge patch of
// pods/status (conditions merge by type) whose metadata.uid is the pod's:
// the API server refuses it (409) for another pod of that name.
func (r *Reporter) patchCondition(ctx context.Context, pod plugin.Pod, status corev1.ConditionStatus, reason, msg string, since metav1.Time) error {
	msg = truncate(msg, maxNote)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": pod.UID},
		"status": map[string]any{"conditions": []corev1.PodCondition{{Type: ConditionType, Status: status, Reason: reason, Message: msg, LastTransitionTime: since}}}})
	if err != nil {
		return err
	}
	return r.opt.API.PatchPodStatus(ctx, pod.Namespace, pod.Name, patch)
}
