// Package kube tells a pod's owners what became of its host ports, where
// they look (kubectl describe pod): an event on the pod through client-go's
// events.k8s.io recorder, and the pod condition
// hcn.nri.io/port-mappings-ready, which a pod can list in its
// readinessGates. The API server is never on the path of HCN work: reports
// wait in a bounded queue (the oldest dropped when it is full) for one
// worker that retries them.
package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/backoff"
)

// ConditionType is the pod condition the plugin writes.
const ConditionType corev1.PodConditionType = "hcn.nri.io/port-mappings-ready"

// Event reasons and the reporting controller.
const (
	ReasonMapped = "PortsMapped"
	ReasonFailed = "PortMappingFailed"
	Controller   = "nri-hcn-portmap"
	Action       = "MapHostPorts"
)

// Metrics counts what the reporter does.
type Metrics interface {
	KubeReport(what, result string) // what: event, condition; result: sent, failed, skipped
	KubeDropped()                   // a report dropped from a full queue
}

// Options configure a Reporter.
type Options struct {
	Client    kubernetes.Interface
	Node      string // reports only for pods of this node
	QueueSize int
	Metrics   Metrics
	Log       *logrus.Entry
	Timeout   time.Duration // per API call; 5 s when zero
	Attempts  int           // per report; 5 when zero
}

type item struct {
	rep      plugin.PodReport
	attempts int
}

// Reporter implements plugin.Reporter against the API server.
type Reporter struct {
	opt         Options
	broadcaster events.EventBroadcaster
	recorder    events.EventRecorder

	mu    sync.Mutex
	queue []item
	wake  chan struct{}
	last  map[string]string // namespace/name -> the last state reported
}

var _ plugin.Reporter = (*Reporter)(nil)

// New returns a Reporter; Run makes it work.
func New(o Options) *Reporter {
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Attempts <= 0 {
		o.Attempts = 5
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 256
	}
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: o.Client.EventsV1()})
	return &Reporter{opt: o, broadcaster: b, recorder: b.NewRecorder(scheme.Scheme, Controller),
		wake: make(chan struct{}, 1), last: map[string]string{}}
}

// Report implements plugin.Reporter: it queues and returns at once. What
// was already reported for the pod is not queued again (every resync
// reports each mapped pod; a full queue must not drop news for repeats).
func (r *Reporter) Report(rep plugin.PodReport) {
	r.mu.Lock()
	same := r.last[reportKey(rep)] == state(rep)
	r.mu.Unlock()
	if !same {
		r.push(item{rep: rep})
	}
}

func reportKey(rep plugin.PodReport) string { return rep.Pod.Namespace + "/" + rep.Pod.Name }

// maxRemembered bounds what the reporter remembers of pods it reported on
// (pods come and go; forgetting costs at most one repeated report).
const maxRemembered = 8192

func (r *Reporter) push(it item) {
	r.mu.Lock()
	if len(r.queue) >= r.opt.QueueSize {
		r.queue = r.queue[1:] // the oldest goes
		if r.opt.Metrics != nil {
			r.opt.Metrics.KubeDropped()
		}
	}
	r.queue = append(r.queue, it)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *Reporter) pop() (item, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.queue) == 0 {
		return item{}, false
	}
	it := r.queue[0]
	r.queue = r.queue[1:]
	return it, true
}

// Run sends reports until ctx ends.
func (r *Reporter) Run(ctx context.Context) {
	if err := r.broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		r.opt.Log.WithError(err).Error("Kubernetes events cannot be recorded")
	}
	defer r.broadcaster.Shutdown()
	retry := backoff.New(200*time.Millisecond, 10*time.Second)
	for {
		it, ok := r.pop()
		if !ok {
			select {
			case <-r.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		if err := r.send(ctx, it.rep); err != nil {
			it.attempts++
			log := r.opt.Log.WithFields(logrus.Fields{"pod": it.rep.Pod.Name, "namespace": it.rep.Pod.Namespace, "attempt": it.attempts})
			if it.attempts < r.opt.Attempts {
				log.WithError(err).Warn("reporting to the API server failed; will retry")
				r.push(it)
				if !retry.Wait(ctx) {
					return
				}
				continue
			}
			log.WithError(err).Error("reporting to the API server failed; giving up on this report")
		}
		retry.Reset()
	}
}

// state is what a report says, to skip saying it twice.
func state(rep plugin.PodReport) string {
	if rep.Mapped {
		return "mapped " + rep.Endpoint + " " + fmt.Sprint(rep.Policies)
	}
	return "failed " + rep.Reason + " " + rep.Err.Error()
}

func (r *Reporter) count(what, result string) {
	if r.opt.Metrics != nil {
		r.opt.Metrics.KubeReport(what, result)
	}
}

func (r *Reporter) send(ctx context.Context, rep plugin.PodReport) error {
	key := reportKey(rep)
	st := state(rep)
	r.mu.Lock()
	same := r.last[key] == st
	r.mu.Unlock()
	if same {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, r.opt.Timeout)
	defer cancel()
	pods := r.opt.Client.CoreV1().Pods(rep.Pod.Namespace)
	pod, err := pods.Get(cctx, rep.Pod.Name, metav1.GetOptions{})
	if err != nil {
		r.count("event", "failed")
		return fmt.Errorf("reading pod %s: %w", key, err)
	}
	if pod.Spec.NodeName != r.opt.Node || (rep.Pod.UID != "" && string(pod.UID) != rep.Pod.UID) {
		r.count("event", "skipped") // another node's pod, or another pod of that name
		return nil
	}
	status, reason, msg := corev1.ConditionTrue, ReasonMapped, mappedNote(rep)
	if rep.Mapped {
		r.recorder.Eventf(pod, nil, corev1.EventTypeNormal, ReasonMapped, Action, "%s", msg)
	} else {
		status, reason, msg = corev1.ConditionFalse, rep.Reason, rep.Err.Error()
		r.recorder.Eventf(pod, nil, corev1.EventTypeWarning, ReasonFailed, Action, "%s: %s", rep.Reason, msg)
	}
	r.count("event", "sent")
	if err := r.patchCondition(cctx, pod, status, reason, msg); err != nil {
		r.count("condition", "failed")
		return err
	}
	r.count("condition", "sent")
	r.mu.Lock()
	if len(r.last) >= maxRemembered {
		clear(r.last)
	}
	r.last[key] = st
	r.mu.Unlock()
	return nil
}

func mappedNote(rep plugin.PodReport) string {
	ms := make([]string, 0, len(rep.Policies))
	for _, p := range rep.Policies {
		ms = append(ms, p.String())
	}
	return fmt.Sprintf("host ports mapped by HNS endpoint %s: %s", rep.Endpoint, strings.Join(ms, ", "))
}

// patchCondition sets the pod's condition with a strategic merge patch of
// pods/status (conditions merge by type); the transition time moves only
// when the status changes.
func (r *Reporter) patchCondition(ctx context.Context, pod *corev1.Pod, status corev1.ConditionStatus, reason, msg string) error {
	now := metav1.Now()
	for _, c := range pod.Status.Conditions {
		if c.Type == ConditionType && c.Status == status {
			now = c.LastTransitionTime
		}
	}
	if len(msg) > 1024 {
		msg = msg[:1024]
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{{
		Type: ConditionType, Status: status, Reason: reason, Message: msg, LastTransitionTime: now}}}})
	if err != nil {
		return err
	}
	_, err = r.opt.Client.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	if err != nil {
		return fmt.Errorf("patching the condition of pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}
