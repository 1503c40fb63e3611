package plugin

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

// The entry points: each records what its trigger saw in the sandbox's
// record and adds the sandbox to the queue; none decides anything. The NRI
// ones wait for the sync's outcome within the runtime's deadline.

// podOf is the request a trigger gives, keeping only what the controller
// reads (the runtime's maps are not held on to).
func podOf(p Pod) Pod {
	out := p
	out.Annotations = nil
	if v, ok := p.Annotations[request.AnnotationPortMappings]; ok {
		out.Annotations = map[string]string{request.AnnotationPortMappings: v}
	}
	out.Labels = maps.Clone(p.Labels)
	return out
}

// setPod records the trigger's pod unless the record knows more (a whole
// request is not replaced by a partial one).
func setPod(r *record, p Pod) {
	if r.pod.ID == "" || !p.Partial {
		r.pod = podOf(p)
	}
}

// StartPod is the runtime's RunPodSandbox: the sandbox runs (the request
// says so) and asks for what the pod's request gives. It waits for the
// sync's outcome at most the deadline, and that outcome is the answer:
// work that needs no HCN answer (parsing, admission, conflicts) fails the
// pod at once. When HCN is slower than the deadline: fail-open returns nil
// and the work goes on (retrying what passes, until the endpoint exists or
// the pod is gone); fail-closed returns ErrDeadline and records a stop,
// whose sync removes whatever the start made.
func (c *Core) StartPod(ctx context.Context, p Pod) error {
	dctx, cancel := context.WithTimeout(ctx, c.opt.Deadline)
	defer cancel()
	_, err, answered := c.await(dctx, p.ID, func(r *record) {
		setPod(r, p)
		r.started, r.sandbox = true, true
	}, false)
	if answered {
		c.opt.Observer.Operation("start", Classify(err))
		return err
	}
	c.opt.Observer.Operation("start", ClassDeadline)
	log := c.PodLog(p).WithField("deadline", c.opt.Deadline.String())
	if c.opt.FailOpen {
		log.Warn("HCN is slower than the deadline: the pod proceeds, its endpoint is completed in the background (fail-open)")
		return nil
	}
	c.enqueue(p.ID, func(r *record) { r.stopped = true }, nil) // the runtime is told the pod failed: leave nothing behind
	log.Warn("HCN is slower than the deadline: the pod fails, its endpoint is rolled back (fail-closed)")
	return fmt.Errorf("pod %s: %w (%s, failure_policy fail-closed); what was started is rolled back", p, ErrDeadline, c.opt.Deadline)
}

// StopPod is the runtime's StopPodSandbox: the sandbox stopped, for good.
// It waits for the removal at most the deadline; removal trouble never
// fails the runtime's request (what passes is retried, the resync removes
// what is left).
func (c *Core) StopPod(ctx context.Context, p Pod) {
	c.stopPod(ctx, p, false)
}

// RemovePod is the runtime's RemovePodSandbox: the sandbox is stopped and
// containerd no longer has it (a no-op when the stop did the work).
func (c *Core) RemovePod(ctx context.Context, p Pod) {
	c.stopPod(ctx, p, true)
}

func (c *Core) stopPod(ctx context.Context, p Pod, removed bool) {
	dctx, cancel := context.WithTimeout(ctx, c.opt.Deadline)
	defer cancel()
	_, err, answered := c.await(dctx, p.ID, func(r *record) {
		setPod(r, p)
		r.stopped, r.sandbox = true, true
		r.removed = r.removed || removed
	}, false)
	switch {
	case answered:
		c.opt.Observer.Operation("stop", Classify(err))
		if err != nil {
			c.PodLog(p).WithError(err).Error("endpoint not removed; the resync will retry")
		}
	case ctx.Err() == nil:
		c.opt.Observer.Operation("stop", ClassDeadline)
		c.PodLog(p).Warn("HCN is slower than the deadline: the endpoint is removed in the background")
	}
}

// Started: containerd's /tasks/start for the container id (a sandbox's, or
// an application container's, which the sync tells apart). report, when
// set, hears the final outcome.
func (c *Core) Started(id string, report func(error)) {
	c.enqueue(id, func(r *record) {
		setPod(r, Pod{ID: id, Partial: true})
		r.started = true
	}, reporter(report))
}

// Exited: containerd's /tasks/exit or /tasks/delete of the container id's
// init process: if id is a sandbox, it stopped for good. Nothing is asked
// of containerd: a stop is recorded for any container, and costs nothing
// for one that has no endpoint. report, when set, hears the outcome
// (ErrNotSandbox when id is not known to be a sandbox and had nothing).
func (c *Core) Exited(id string, report func(error)) {
	c.enqueue(id, func(r *record) {
		setPod(r, Pod{ID: id, Partial: true})
		r.stopped = true
	}, reporter(report))
}

// Deleted: containerd's /containers/delete: containerd no longer has the
// container id.
func (c *Core) Deleted(id string, report func(error)) {
	c.enqueue(id, func(r *record) {
		setPod(r, Pod{ID: id, Partial: true})
		r.stopped, r.removed = true, true
	}, reporter(report))
}

func reporter(report func(error)) *waiter {
	if report == nil {
		return nil
	}
	return &waiter{done: func(_ Change, err error) { report(err) }}
}

// Summary counts what a reconcile did.
type Summary struct {
	Created, Deleted, Unchanged, Failed int
	Errors                              []error
}

// Log writes the summary line of a reconcile (what: synchronize, resync)
// and one warning per sandbox that failed.
func (s Summary) Log(log *logrus.Entry, what string) {
	l := log.WithFields(logrus.Fields{"created": s.Created, "deleted": s.Deleted, "unchanged": s.Unchanged, "failed": s.Failed})
	for _, err := range s.Errors {
		l.WithError(err).Warn(what + ": a sandbox could not be reconciled")
	}
	l.Info(what + " done")
}

func (s *Summary) add(r Change, err error) {
	switch {
	case err != nil && !kindOf(err).quiet:
		s.Failed++
		s.Errors = append(s.Errors, err)
	case r == Built:
		s.Created++
	case r == Removed:
		s.Deleted++
	case r == Kept:
		s.Unchanged++
	}
}

// Reconcile is NRI's Synchronize and the body of every resync: pods is the
// complete list of sandboxes the runtime knows. Each of them, every
// endpoint of ours HNS holds and every sandbox the controller knows of is
// synced; what pods does not list is checked with containerd. The summary
// counts the first attempt of each (failures that pass are retried by the
// queue as always).
func (c *Core) Reconcile(ctx context.Context, pods []Pod) (Summary, error) {
	listed, err := c.takeListing(ctx)
	if err != nil {
		return Summary{}, err
	}
	inList := make(map[string]bool, len(pods))
	for _, p := range pods {
		inList[p.ID] = true
	}
	ids := slices.Concat(c.st.ids(), listed)
	var (
		mu  sync.Mutex
		sum Summary
		wg  sync.WaitGroup
	)
	count := func(r Change, err error) {
		mu.Lock()
		sum.add(r, err)
		mu.Unlock()
		wg.Done()
	}
	seen := map[string]bool{}
	for _, p := range pods {
		if seen[p.ID] {
			continue
		}
		seen[p.ID] = true
		wg.Add(1)
		c.enqueue(p.ID, func(r *record) {
			setPod(r, p)
			r.sandbox = true
		}, &waiter{first: true, done: count})
	}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		wg.Add(1)
		c.enqueue(id, func(r *record) {
			setPod(r, Pod{ID: id, Partial: true})
			r.verify = !inList[id]
		}, &waiter{first: true, done: count})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return Summary{}, ctx.Err()
	}
	mu.Lock()
	defer mu.Unlock()
	return sum, nil
}

// ReconcileAll reconciles every sandbox containerd knows, every endpoint of
// ours and every sandbox the controller knows of: the periodic resync and
// the repair after missed events.
func (c *Core) ReconcileAll(ctx context.Context) (Summary, error) {
	ids, err := c.store.ListSandboxes(ctx)
	if err != nil {
		return Summary{}, err
	}
	pods := make([]Pod, 0, len(ids))
	for _, id := range ids {
		pods = append(pods, Pod{ID: id, Partial: true})
	}
	return c.Reconcile(ctx, pods)
}

// LoadPorts reads our endpoints from HNS into the state (at start, so that
// conflicts with pods started before a restart are caught, and so that the
// state can say a sandbox has no endpoint without asking HNS).
func (c *Core) LoadPorts(ctx context.Context) error {
	_, err := c.takeListing(ctx)
	return err
}

// takeListing lists our endpoints in HNS and hands the listing to the
// state; it returns the sandboxes the listing showed.
func (c *Core) takeListing(ctx context.Context) ([]string, error) {
	start := c.st.startListing()
	owned, err := c.mgr.Owned(ctx)
	if err != nil {
		c.st.abortListing()
		return nil, err
	}
	bySandbox := map[string][]hcn.Endpoint{}
	for _, ep := range owned {
		if id, ok := c.mgr.SandboxID(ep.Name); ok {
			bySandbox[id] = append(bySandbox[id], ep)
		}
	}
	return c.st.applyListing(start, bySandbox), nil
}

// SandboxMappings is who maps the host ports of one sandbox, as the
// controller knows it: its own endpoint's, and the CNI's.
type SandboxMappings struct {
	Sandbox  string                  `json:"sandbox"`
	Pod      string                  `json:"pod,omitempty"`      // namespace/name
	Endpoint string                  `json:"endpoint,omitempty"` // ours
	Ours     []hcn.PortMappingPolicy `json:"ours,omitempty"`
	CNI      []CNIMapping            `json:"cni,omitempty"`
}

// Mappings is who maps each host port of every sandbox the controller
// holds something for (GET /mappings, read by `status`).
func (c *Core) Mappings() []SandboxMappings { return c.st.mappings() }
