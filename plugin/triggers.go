package plugin

import (
	"context"
	"fmt"
)

// The entry points: each builds a sighting of what its trigger saw, which
// the state records in the sandbox's inbox (Core.enqueue), and adds the
// sandbox to the queue; none does I/O or decides what a sandbox gets. The
// NRI ones wait for the outcome of a sync that began after them, within
// the runtime's deadline; past it the failure policy answers
// (pastDeadline).

// await enqueues and waits for the outcome until ctx ends or the core
// closes; answered is false when ctx ended first (the work goes on).
func (c *Core) await(ctx context.Context, id string, seen sighting, first bool) (ch Change, err error, answered bool) {
	r, answered := c.awaitResult(ctx, id, seen, first)
	return r.change, r.err, answered
}

// awaitResult is await's whole answer.
func (c *Core) awaitResult(ctx context.Context, id string, seen sighting, first bool) (result, bool) {
	results := make(chan result, 1)
	seen.wait = &waiter{first: first, ch: results}
	c.enqueue(id, seen)
	select {
	case r := <-results:
		return r, true
	case <-c.closed:
		return result{change: NoChange, err: ErrClosed}, true
	case <-ctx.Done():
		return result{change: NoChange, err: ctx.Err()}, false
	}
}

// StartPod is the runtime's RunPodSandbox: the sandbox runs (the request
// says so) and asks for what the pod's request gives. It waits for the
// sync's outcome at most the deadline, and that outcome is the answer;
// past the deadline, the failure policy answers (pastDeadline).
func (c *Core) StartPod(ctx context.Context, p Pod) error {
	dctx, cancel := context.WithTimeout(ctx, c.opt.Deadline)
	defer cancel()
	_, err, answered := c.await(dctx, p.ID, sighting{pod: &p, start: true, claim: true, path: PathNRI}, false)
	if answered {
		c.opt.Observer.Operation("start", Classify(err))
		if kindOf(err).starts { // the pod runs without those host ports; its owners are told why
			return nil
		}
		return err
	}
	c.opt.Observer.Operation("start", Classify(ErrDeadline))
	return c.pastDeadline(p)
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
		c.opt.Observer.Operation("stop", Classify(ErrDeadline))
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
	for _, id := range c.st.inNamespace(ns, func(k known) bool { return k.err != nil && kindOf(k.err).byNamespace }) {
		c.enqueue(id, sighting{})
	}
}

// NetworkPoliciesChanged: the NetworkPolicies of Kubernetes namespace ns
// changed ("": of every namespace, or what the plugin knows of them
// became too old, or known again). Its sandboxes whose host ports are in
// place, and those whose last sync a NetworkPolicy decided, are synced
// again at once: a policy that now isolates a mapped pod unmaps it, one
// removed or widened maps a pod without a restart.
func (c *Core) NetworkPoliciesChanged(ns string) {
	for _, id := range c.st.inNamespace(ns, func(k known) bool {
		return len(k.eps) > 0 || len(k.ports) > 0 || (k.err != nil && kindOf(k.err).byPolicy)
	}) {
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

// Mappings is who maps each host port of every sandbox the controller
// holds something for (GET /mappings, read by `status`).
func (c *Core) Mappings() []SandboxMappings { return c.st.mappings() }

// ForeignDNS counts the pods whose endpoint carries DNS other than theirs
// (SandboxMappings.ForeignDNS).
func (c *Core) ForeignDNS() int { return c.st.foreignDNS() }

// enqueue records what a trigger saw of a sandbox and adds it to the
// queue.
func (c *Core) enqueue(id string, seen sighting) {
	if c.closing.Load() {
		return
	}
	c.st.trigger(id, seen)
	c.q.Add(id)
}

// pastDeadline is the answer to a runtime whose RunPodSandbox waited the
// whole deadline (HCN slower than that): fail-open lets the pod proceed,
// its endpoint completed in the background (retrying what passes, until
// it exists or the pod is gone); fail-closed fails the pod with
// ErrDeadline, naming what held it up, and records a stop, whose sync
// removes whatever the start made.
func (c *Core) pastDeadline(p Pod) error {
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
