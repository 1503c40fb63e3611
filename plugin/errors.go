package plugin

import (
	"context"
	"errors"
	"fmt"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
)

// ErrClosed: the core was closed before the work ran.
var ErrClosed = errors.New("plugin shutting down")

// ErrDeadline: HCN did not finish a fail-closed pod start in time.
var ErrDeadline = errors.New("HCN did not finish within the deadline")

// errHolderPending: a conflict whose holder's own sync has not yet told
// whether the holder still runs (it may be stopping right now, or gone
// while nobody listened); the holder is synced and the conflict decided on
// the next attempt.
var errHolderPending = errors.New("waiting for the pod holding the host port to be checked")

// retry says whether the queue tries a failed sync again.
type retry int

const (
	retryNever   retry = iota // final: retrying cannot help
	retryBounded              // unclassified: a few tries (UnclassifiedAttempts), then the next resync
	retryAlways               // passes by itself (HNS unreachable, a holder being checked): while the work matters
)

// UnclassifiedAttempts bounds the tries of work that fails with an error
// nobody has classified: it is reported failed after that (the resync tries
// again), instead of hammering HNS forever.
const UnclassifiedAttempts = 5

// errorKind is one row of the table: how the controller treats an error
// wherever it is asked.
type errorKind struct {
	retry retry
	// class is the operation's result in the metrics (Class* constants).
	class string
	// reason tells the pod's owners why mapping failed (Reason*); "" when
	// it is not their business (the sandbox went away, a retry decides).
	reason string
	// quiet: not a failure of the work (a reconcile does not count it as
	// failed); logged at debug level.
	quiet bool
	// level and says: how an event-driven start that ended so is logged.
	level logrus.Level
	says  string
	// quietRetry: a retry for it is logged at debug level (it is
	// expected), not as a warning.
	quietRetry bool
}

// errorKinds is the table, first match wins. Every question about an
// error (retry it? which metric? what do the owners read? how is it
// logged?) is answered from it, through kindOf.
func errorKinds() []struct {
	is   func(error) bool
	kind errorKind
} {
	is := func(target error) func(error) bool { return func(err error) bool { return errors.Is(err, target) } }
	return []struct {
		is   func(error) bool
		kind errorKind
	}{
		{is(ErrClosed), errorKind{retryNever, ClassError, "", true, logrus.DebugLevel, "not done: the plugin is stopping", false}},
		{is(context.Canceled), errorKind{retryNever, ClassError, "", true, logrus.DebugLevel, "not done: the plugin is stopping", false}},
		{is(ErrNotSandbox), errorKind{retryNever, "", "", true, logrus.DebugLevel, "not a sandbox", false}},
		{is(ErrSandboxNotFound), errorKind{retryNever, ClassError, "", true, logrus.DebugLevel, "container gone before its start was handled", false}},
		{hcn.NamespaceGone, errorKind{retryNever, ClassError, "", true, logrus.InfoLevel, "sandbox stopped before its endpoint could be attached; nothing left behind", false}},
		{is(errHolderPending), errorKind{retryAlways, ClassError, "", false, logrus.WarnLevel, "waiting for the holder of a host port", true}},
		{is(ErrHyperV), errorKind{retryNever, ClassHyperV, ReasonHyperV, false, logrus.ErrorLevel, "port mappings rejected", false}},
		{is(ErrInvalidPod), errorKind{retryNever, ClassInvalid, ReasonInvalid, false, logrus.ErrorLevel, "port mappings rejected", false}},
		{is(admission.ErrDenied), errorKind{retryNever, ClassDenied, ReasonDenied, false, logrus.ErrorLevel, "port mappings rejected", false}},
		{is(ErrPortConflict), errorKind{retryNever, ClassConflict, ReasonConflict, false, logrus.ErrorLevel, "port mappings rejected", false}},
		{is(ErrDeadline), errorKind{retryNever, ClassDeadline, ReasonHNS, false, logrus.WarnLevel, "HCN slower than the deadline", false}},
		{hcn.Retryable, errorKind{retryAlways, ClassError, ReasonHNS, false, logrus.ErrorLevel, "endpoint not built; retrying", false}},
		{hcn.Permanent, errorKind{retryNever, ClassError, ReasonHNS, false, logrus.ErrorLevel, "endpoint not built; the resync will retry", false}},
	}
}

// unclassified is the row of an error no other row matches: HNS failing in
// a way nobody has mapped (E_FAIL), containerd not answering.
var unclassified = errorKind{retryBounded, ClassError, ReasonHNS, false, logrus.ErrorLevel, "endpoint not built; the resync will retry", false}

// kindOf is err's row of the table; nil is success.
func kindOf(err error) errorKind {
	if err == nil {
		return errorKind{retry: retryNever, class: ClassOK, level: logrus.DebugLevel}
	}
	for _, row := range errorKinds() {
		if row.is(err) {
			return row.kind
		}
	}
	return unclassified
}

// retries reports whether a sync that failed with err on its attempt-th
// try (1 for the first) is tried again.
func retries(err error, attempt int) bool {
	switch kindOf(err).retry {
	case retryAlways:
		return true
	case retryBounded:
		return attempt < UnclassifiedAttempts
	}
	return false
}

// Classify is an operation's result for the metrics.
func Classify(err error) string { return kindOf(err).class }

// failureReason is why err failed the pod's mappings, "" when it is not the
// pod owner's business.
func failureReason(err error) string { return kindOf(err).reason }

// LogStart logs how an event-driven start ended, as the table says.
func LogStart(log *logrus.Entry, err error) {
	if err == nil {
		return
	}
	k := kindOf(err)
	log.WithError(err).Log(k.level, k.says)
}

// errPod wraps err with the pod it concerns.
func errPod(p Pod, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("pod %s: %w", p, err)
}
