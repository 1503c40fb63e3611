package plugin

import (
	"context"
	"slices"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/util/workqueue"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/backoff"
)

// The controller's queue is client-go's rate-limited workqueue keyed by
// sandbox ID, as in client-go's controller example: entry points only record
// what they saw and add the key; a worker takes a key, reads the sandbox's
// record once (a snapshot), runs the one sync for it, commits the outcome
// once, says it once (report, metrics, one log line), and puts the key back
// rate-limited when the table of errors says a retry can help. The retry
// count is the queue's. The workqueue never gives one key to two workers
// at once, and a key added while its sync runs is synced again afterwards.

// newQueue returns the queue: each sandbox's retries wait as lim says
// (nil: the one retry rule, backoff.QueueLimiter from RetryMin to
// RetryMax).
func newQueue(lim workqueue.TypedRateLimiter[string], retryMin, retryMax time.Duration, metrics workqueue.MetricsProvider) workqueue.TypedRateLimitingInterface[string] {
	if lim == nil {
		lim = backoff.QueueLimiter(retryMin, retryMax)
	}
	cfg := workqueue.TypedRateLimitingQueueConfig[string]{Name: "nri-hcn-portmap", MetricsProvider: metrics}
	if metrics == nil { // client-go's global provider (a no-op unless someone sets it) is not used
		cfg.MetricsProvider = noQueueMetrics{}
	}
	return workqueue.NewTypedRateLimitingQueueWithConfig(lim, cfg)
}

// NewCore wires a core. The options are complete (OptionsFrom makes them
// from a configuration); a nil Observer or Reporter is nobody.
func NewCore(mgr *hcn.Manager, store SandboxStore, opt Options, log *logrus.Entry) *Core {
	if opt.Reporter == nil {
		opt.Reporter = nopReporter{}
	}
	if opt.Observer == nil {
		opt.Observer = nopObserver{}
	}
	bg, stop := context.WithCancel(context.Background())
	c := &Core{mgr: mgr, store: store, opt: opt, log: log, st: newState(), q: newQueue(opt.limiter, opt.RetryMin, opt.RetryMax, opt.Observer.QueueMetrics()),
		closed: make(chan struct{}), bg: bg, stop: stop}
	c.policy.Store(opt.Admission)
	c.startWorkers(opt.Workers)
	return c
}

func (c *Core) startWorkers(n int) {
	for range n {
		c.workers.Go(func() {
			for {
				id, shutdown := c.q.Get()
				if shutdown {
					return
				}
				c.process(id)
				c.q.Done(id)
			}
		})
	}
}

// process runs one sync of a sandbox: the snapshot, the sync, the commit,
// then the outcome said once, and the retry as the table of errors says.
func (c *Core) process(id string) {
	sn, ok := c.st.snapshot(id, c.q.NumRequeues(id)+1)
	if !ok || (!sn.act && !sn.listing) {
		// a delayed retry of work already done: nothing was seen since
		// the last sync, whose outcome (a pod held back until the
		// NetworkPolicies are read) stands; a sync would decide nothing
		// and forget it
		c.q.Forget(id)
		return
	}
	// A sync is never cut short (an HNS call given up on would leave what
	// it creates late behind); each HNS call is bounded anyway.
	ctx, cancel := context.WithTimeout(context.Background(), config.SyncBound)
	in := c.inputs()
	out := c.sync(ctx, sn, in)
	cancel()
	overtaken := c.inputsGen.Load() != in.gen
	if overtaken {
		unadmitted(sn, &out, c.now())
	}
	v := judge(out.pod, out.err, sn.attempt, c.closing.Load()) // the pod named once, the row read once
	out.err, out.known.err, out.known.reason = v.err, v.err, v.kind.reason
	if out.pod.Name != "" {
		out.known.name, out.known.namespace = out.pod.HolderName(), out.pod.Namespace
	}
	mapped := out.err == nil && !sn.known.timed && !sn.startedAt.IsZero() && len(out.known.eps) > 0
	out.known.timed = sn.known.timed || mapped
	if !v.again {
		out.known.waitFor = nil // a conflict's wait ends with its work
	}
	tell := c.st.commit(id, sn, out.known, v.again)
	if mapped { // its host ports first in place
		c.opt.Observer.Mapped(sn.startPath, time.Since(sn.startedAt))
	}
	c.tell(sn, out, v, tell)
	for _, h := range out.also {
		c.enqueue(h, sighting{}) // a conflict asks: does the holder still run?
	}
	if overtaken { // decided again with the inputs in force now
		c.enqueue(id, sighting{})
	}
	if out.recheck > 0 {
		c.q.AddAfter(id, out.recheck)
	}
	if v.again {
		c.q.AddRateLimited(id)
	} else {
		c.q.Forget(id)
	}
}

// unadmitted takes back, from what a sync whose inputs changed before it
// committed built, the admission of every host port the sandbox did not
// hold before: a mapping not in place when a policy or labels changed is
// judged by them (the sync after this one), so its ports are held as
// unsure, never as admitted.
func unadmitted(sn snap, out *outcome, now time.Time) {
	var held, fresh []hcn.PortMappingPolicy
	for _, p := range out.known.ports {
		if slices.Contains(sn.known.ports, p) {
			held = append(held, p)
		} else {
			fresh = append(fresh, p)
		}
	}
	if len(fresh) == 0 {
		return
	}
	out.known.ports, out.known.unsure, out.known.unsureSince = held, withPorts(out.known.unsure, fresh), now
}

// tell says a sync's outcome once: the owners' report, the metrics, the
// waiters it answers and one log line, each as the error's row says.
func (c *Core) tell(sn snap, out outcome, v verdict, waiters []waiter) {
	if rep := ownersReport(sn, out, v.kind.reason); rep != nil {
		c.opt.Reporter.Report(*rep)
	}
	for _, r := range out.skipped {
		c.opt.Observer.Skipped(r)
	}
	k, again := v.kind, v.again
	for _, w := range waiters {
		if w.kind != "" && k.counted {
			c.opt.Observer.Operation(w.kind, k.class)
		}
		if w.ch != nil {
			w.ch <- result{change: out.change, err: out.err, eps: out.known.eps, neighbours: out.neighbours, neighboursRead: out.neighboursRead}
		}
	}
	log := c.PodLog(out.pod)
	switch {
	case out.err == nil && out.line.msg != "":
		log.WithFields(out.line.fields).Log(out.line.level, out.line.msg)
	case out.err == nil:
	case again:
		level := logrus.WarnLevel
		if k.quietRetry {
			level = logrus.DebugLevel
		}
		log.WithField("attempt", sn.attempt).WithError(out.err).Log(level, "sync failed; retrying")
	case k.retry == retryBounded:
		log.WithField("attempts", sn.attempt).WithError(out.err).Log(k.level, k.says)
	default:
		log.WithFields(out.line.fields).WithError(out.err).Log(k.level, k.says)
	}
}
