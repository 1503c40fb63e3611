package plugin

import (
	"context"
	"time"

	"github.com/sirupsen/logrus"
)

// Resyncer reconciles HCN against every sandbox containerd knows: on demand
// (after missed events) and every interval.
type Resyncer struct {
	core     *Core
	interval time.Duration
	workers  int
	timeout  time.Duration
	log      *logrus.Entry
}

// NewResyncer returns a resyncer; interval 0 disables the periodic runs.
func NewResyncer(core *Core, interval time.Duration, log *logrus.Entry) *Resyncer {
	return &Resyncer{core: core, interval: interval, workers: 8, timeout: 5 * time.Minute, log: log.WithField("source", "resync")}
}

// Once runs one full reconcile and logs its summary line.
func (r *Resyncer) Once(ctx context.Context, reason string) (Summary, error) {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	sum, err := r.core.ReconcileAll(ctx, r.workers)
	log := r.log.WithField("reason", reason)
	if err != nil {
		log.WithError(err).Error("resync failed")
		return sum, err
	}
	sum.Log(log, "resync")
	r.core.Observer().Reconciled(reason, sum.Created, sum.Deleted, sum.Unchanged, sum.Failed)
	return sum, nil
}

// Run resyncs every interval until ctx ends; it returns at once when the
// interval is 0.
func (r *Resyncer) Run(ctx context.Context) {
	if r.interval <= 0 {
		return
	}
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_, _ = r.Once(ctx, "periodic")
		}
	}
}
