package plugin

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"

	"github.com/sirupsen/logrus"
)

// Resyncer reconciles HCN against every sandbox containerd knows: on demand
// (after missed events) and every interval.
type Resyncer struct {
	core     *Core
	interval time.Duration
	timeout  time.Duration
	log      *logrus.Entry
	kick     chan string // a requested resync and its reason; one waits at most
}

// NewResyncer returns a resyncer; interval 0 disables the periodic runs.
func NewResyncer(core *Core, interval time.Duration, log *logrus.Entry) *Resyncer {
	return &Resyncer{core: core, interval: interval, timeout: config.ResyncBound, log: log.WithField("source", "resync"),
		kick: make(chan string, 1)}
}

// Once runs one full reconcile and logs its summary line.
func (r *Resyncer) Once(ctx context.Context, reason string) (Summary, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	sum, err := r.core.ReconcileAll(ctx)
	log := r.log.WithField("reason", reason)
	if err != nil {
		k := kindOf(err) // the plugin stopping is no failure
		log.WithError(err).Log(k.level, "resync failed: "+k.says)
		return sum, err
	}
	sum.Log(log, "resync")
	r.core.Observer().Reconciled(reason, sum.Created, sum.Deleted, sum.Unchanged, sum.Failed)
	return sum, nil
}

// Trigger asks for a resync (after missed events). Requests are merged:
// one made while a resync runs makes exactly one more run afterwards, however
// many arrive, so a flapping containerd cannot stack full reconciles.
func (r *Resyncer) Trigger(reason string) {
	select {
	case r.kick <- reason:
	default: // one is pending already
	}
}

// Run resyncs when triggered and every interval (0: only when triggered),
// one at a time, until ctx ends.
func (r *Resyncer) Run(ctx context.Context) {
	var tick <-chan time.Time
	if r.interval > 0 {
		t := time.NewTicker(r.interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case reason := <-r.kick:
			_, _ = r.Once(ctx, reason)
		case <-tick:
			_, _ = r.Once(ctx, "periodic")
		}
	}
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
