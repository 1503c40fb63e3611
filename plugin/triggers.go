package plugin

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// The entry points: each records what its trigger saw in the sandbox's
// record and adds the sandbox to the queue; none decides anything. The NRI
// ones wait for the sync's outcome within the runtime's deadline.

// waiter is told the outcome of a sandbox's sync: of the first attempt
// after it was added (first), or of the final one (after the retries of
// failures that pass). A request that must answer (NRI, a reconcile)
// waits on ch; an event's outcome is counted by the worker as kind.
type waiter struct {
	gen   uint64 // the inbox generation it was added at
	first bool
	kind  string        // event-start, event-stop: counted as that operation
	ch    chan<- result // nil: nobody waits
}

type result struct {
	change Change
	err    error
}

// enqueue records what a trigger saw of a sandbox and adds it to the
// queue.
func (c *Core) enqueue(id string, seen sighting) {
	if c.closing.Load() {
		return
	}
	c.st.trigger(id, seen)
	c.q.Add(id)
}

// await enqueues and waits for the outcome until ctx ends or the core
// closes; answered is false when ctx ended first (the work goes on).
func (c *Core) await(ctx context.Context, id string, seen sighting, first bool) (ch Change, err error, answered bool) {
	results := make(chan result, 1)
	seen.wait = &waiter{first: first, ch: results}
	c.enqueue(id, seen)
	select {
	case r := <-results:
		return r.change, r.err, true
	case <-c.closed:
		return NoChange, ErrClosed, true
	case <-ctx.Done():
		return NoChange, ctx.Err(), false
	}
}

// shutdownQueue stops taking work and lets the workers finish the syncs
// that run; whoever waits for work that will not run is told ErrClosed.
func (c *Core) shutdownQueue() {
	c.closing.Store(true)
	close(c.closed)
	c.q.ShutDown()
	c.workers.Wait()
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
	_, err, answered := c.await(dctx, p.ID, sighting{pod: &p, start: true, claim: true, path: PathNRI}, false)
	if answered {
		c.opt.Observer.Operation("start", Classify(err))
		return err
	}
	c.opt.Observer.Operation("start", ClassDeadline)
	log := c.PodLog(p).WithField("deadline", c.opt.Deadline.String())
	last := c.st.lastErr(p.ID) // what held it up, when a sync has said
	if last != nil {
		log = log.WithError(last)
	}
	if c.opt.FailOpen {
		log.Warn("host ports not in place within the deadline: the pod proceeds, its endpoint is completed in the background (fail-open)")
		return nil
	}
	c.enqueue(p.ID, sighting{stop: true}) // the runtime is told the pod failed: leave nothing behind
	log.Warn("host ports not in place within the deadline: the pod fails, its endpoint is rolled back (fail-closed)")
	if last != nil {
		return fmt.Errorf("pod %s: %w (%s, failure_policy fail-closed); what was started is rolled back; the last attempt: %w",
			p, ErrDeadline, c.opt.Deadline, last)
	}
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
	_, err, answered := c.await(dctx, p.ID, sighting{pod: &p, stop: true, remove: removed, claim: true}, false)
	switch {
	case answered:
		c.opt.Observer.Operation("stop", Classify(err))
	case ctx.Err() == nil:
		c.opt.Observer.Operation("stop", ClassDeadline)
		c.PodLog(p).Warn("HCN is slower than the deadline: the endpoint is removed in the background")
	}
}

// Started: containerd's /tasks/start for the container id (a sandbox's, or
// an application container's, which the sync tells apart). Its outcome is
// counted and logged by the worker that syncs it.
func (c *Core) Started(id string) { c.enqueue(id, startedEvent(id)) }

// Exited: containerd's /tasks/exit or /tasks/delete of the container id's
// init process: if id is a sandbox, it stopped for good. Nothing is asked
// of containerd: a stop is recorded for any container, and costs nothing
// for one that has no endpoint.
func (c *Core) Exited(id string) { c.enqueue(id, exitedEvent(id)) }

// Deleted: containerd's /containers/delete: containerd no longer has the
// container id.
func (c *Core) Deleted(id string) { c.enqueue(id, deletedEvent(id)) }

// NamespaceChanged: the API server's labels of Kubernetes namespace ns
// became known or changed. Its sandboxes whose last sync failed for a
// reason those labels decide (a Pod Security level not known yet, or one
// that refused the annotation) are synced again at once, not on their
// retry timer.
func (c *Core) NamespaceChanged(ns string) {
	for _, id := range c.st.inNamespace(ns, func(err error) bool { return kindOf(err).byNamespace }) {
		c.enqueue(id, sighting{})
	}
}

// What each containerd event says of a container.
func startedEvent(id string) sighting {
	return sighting{pod: &Pod{ID: id, Partial: true}, start: true, path: PathEvents, wait: &waiter{kind: "event-start"}}
}

func exitedEvent(id string) sighting {
	return sighting{pod: &Pod{ID: id, Partial: true}, stop: true, wait: &waiter{kind: "event-stop"}}
}

func deletedEvent(id string) sighting {
	return sighting{pod: &Pod{ID: id, Partial: true}, stop: true, remove: true, wait: &waiter{kind: "event-stop"}}
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
// synced, each told what the listing of HNS showed of it; what pods does
// not list is checked with containerd. The summary counts the first
// attempt of each (failures that pass are retried by the queue as always).
func (c *Core) Reconcile(ctx context.Context, pods []Pod) (Summary, error) {
	listed, err := c.listing(ctx)
	if err != nil {
		return Summary{}, err
	}
	inList := make(map[string]bool, len(pods))
	for _, p := range pods {
		inList[p.ID] = true
	}
	ids := slices.Concat(c.st.ids(), slices.Collect(maps.Keys(listed)))
	results := make(chan result, len(pods)+len(ids))
	n := 0
	seen := map[string]bool{}
	for _, p := range pods {
		if seen[p.ID] {
			continue
		}
		seen[p.ID] = true
		n++
		c.enqueue(p.ID, sighting{pod: &p, claim: true, listing: true, listed: listed[p.ID], wait: &waiter{first: true, ch: results}})
	}
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		n++
		c.enqueue(id, sighting{pod: &Pod{ID: id, Partial: true}, verify: !inList[id], listing: true, listed: listed[id],
			wait: &waiter{first: true, ch: results}})
	}
	c.st.markLoaded()
	var sum Summary
	for range n {
		select {
		case r := <-results:
			sum.add(r.change, r.err)
		case <-c.closed:
			return sum, ErrClosed
		case <-ctx.Done():
			return Summary{}, ctx.Err()
		}
	}
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

// LoadPorts lists our endpoints in HNS at start (so that conflicts with
// pods started before a restart are caught, and so that a sandbox without
// an endpoint is known without asking HNS): each sandbox listed is told
// what the listing showed, and its sync learns it and decides nothing (the
// reconcile that follows decides). It returns once every one has learned.
func (c *Core) LoadPorts(ctx context.Context) error {
	listed, err := c.listing(ctx)
	if err != nil {
		return err
	}
	results := make(chan result, len(listed))
	for id, eps := range listed {
		c.enqueue(id, sighting{learn: true, listing: true, listed: eps, wait: &waiter{first: true, ch: results}})
	}
	c.st.markLoaded()
	for range listed {
		select {
		case <-results:
		case <-c.closed:
			return ErrClosed
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// listing lists our endpoints in HNS, by sandbox.
func (c *Core) listing(ctx context.Context) (map[string][]hcn.Endpoint, error) {
	owned, err := c.mgr.Owned(ctx)
	if err != nil {
		return nil, err
	}
	bySandbox := map[string][]hcn.Endpoint{}
	for _, ep := range owned {
		if id, ok := c.mgr.SandboxID(ep.Name); ok {
			bySandbox[id] = append(bySandbox[id], ep)
		}
	}
	return bySandbox, nil
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
