package kube

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/backoff"
)

// watchWindow is, for a view whose word must be no older than maxAge, how
// long one watch is asked to stay open (client-go's reflector's 5 minutes,
// or half maxAge where that is shorter) and how long past that one is
// ended here (15 s, or a quarter of maxAge): a watch that sends only
// bookmarks, or nothing, is ended and the objects listed again within
// three quarters of maxAge, whatever maxAge is.
func watchWindow(maxAge time.Duration) (timeout, grace time.Duration) {
	return min(config.NamespaceWatchTimeout, maxAge/2), min(config.NamespaceWatchGrace, maxAge/4)
}

// reflector keeps a view of one kind of object current by a list and then
// a watch of the API server, as client-go's reflector keeps an informer's
// store: a watch the API server ends is taken up again from where it was,
// a failed one after a wait and a list, an expired or silent one by
// listing again. The view itself (what a list or an event does to it, how
// old it is) is the caller's: the namespaces' labels, the NetworkPolicies.
type reflector struct {
	what string // the objects, in log lines: "namespaces"
	// listed says what a list gives; listFailed and watchFailed what a
	// failed list or watch leaves meanwhile
	listed, listFailed, watchFailed string
	// list reads every object into the view (n: how many); watch hands
	// each event to the view, telling seen its resource version
	list  func(ctx context.Context) (rv string, n int, err error)
	watch func(ctx context.Context, rv string, timeout time.Duration, seen func(rv string)) error
	// notCurrent: the view stopped following the API server; synced: it
	// follows it (or not), for the metrics (nil: nobody)
	notCurrent func()
	synced     func(bool)
	// timeout is how long one watch is asked to stay open; it is ended
	// here grace past that, a silent connection not being news
	timeout            func() time.Duration
	grace              time.Duration
	retryMin, retryMax time.Duration
	log                *logrus.Entry
}

// run lists, then watches, until ctx ends.
func (r reflector) run(ctx context.Context) {
	retry := backoff.New(r.retryMin, max(r.retryMax, r.retryMin))
	failed := 0
	for ctx.Err() == nil {
		rv, n, err := r.list(ctx)
		if err != nil {
			r.notCurrent()
			failed++
			r.failure(ctx, err, failed, "listing "+r.what+" failed: "+r.listFailed)
			if !retry.Wait(ctx) {
				return
			}
			continue
		}
		level := logrus.DebugLevel
		if failed > 0 {
			level = logrus.InfoLevel // said once it works again
		}
		r.log.WithField(strings.ReplaceAll(r.what, " ", "_"), n).Log(level, r.what+" listed: "+r.listed)
		failed = 0
		retry.Reset()
		for ctx.Err() == nil {
			r.setSynced(true)
			timeout := r.timeout()
			wctx, cancel := context.WithTimeout(ctx, timeout+r.grace)
			err = r.watch(wctx, rv, timeout, func(seen string) {
				if seen != "" {
					rv = seen
				}
			})
			if wctx.Err() != nil && ctx.Err() == nil {
				err = fmt.Errorf("watching %s (timeout %s): %w", r.what, timeout, ErrWatchSilent)
			}
			cancel()
			if err == nil {
				retry.Reset()
				continue // the API server ended it: take it up again
			}
			if k := kindOf(err); k.relist || ctx.Err() != nil {
				if k.stale {
					r.notCurrent()
				}
				r.log.WithError(err).Log(k.level, k.says)
				break // list again
			}
			failed++
			r.notCurrent() // what it holds is what was read last
			r.failure(ctx, err, failed, "watching "+r.what+" failed: "+r.watchFailed)
			if !retry.Wait(ctx) {
				return
			}
			break // list again: a token refused or an API server restarted answers a list as it answers a watch
		}
	}
}

func (r reflector) setSynced(on bool) {
	if r.synced != nil {
		r.synced(on)
	}
}

// failure logs a failed list or watch: the first, and then every tenth,
// at warning level (or error when the plugin is denied: its RBAC).
func (r reflector) failure(ctx context.Context, err error, failed int, msg string) {
	if ctx.Err() != nil {
		return
	}
	level := logrus.DebugLevel
	if failed == 1 || failed%10 == 0 {
		level = logrus.WarnLevel
		if check := kindOf(err).check; check != "" { // the table's word: the operator's to fix
			level, msg = logrus.ErrorLevel, msg+" ("+check+" "+r.what+")"
		}
	}
	r.log.WithError(err).WithField("attempt", failed).Log(level, msg)
}
