package plugin

import (
	"context"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"time"

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
		log.WithError(err).Error("resync failed")
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
