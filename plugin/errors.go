package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/hostsockets"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

// ErrClosed: the core (or an event source's connection to containerd) was
// closed before the work ran.
var ErrClosed = errors.New("plugin shutting down")

// ErrDeadline: HCN did not finish a fail-closed pod start in time.
var ErrDeadline = errors.New("HCN did not finish within the deadline")

// ErrContainerd: containerd did not answer (not reachable, restarting, a
// call timed out): the store wraps every such failure in it. It passes by
// itself.
var ErrContainerd = errors.New("containerd did not answer")

// ErrUndecodableEvent: an event of containerd's the plugin cannot decode
// (a newer containerd's payload): nothing to act on, said once.
var ErrUndecodableEvent = errors.New("undecodable containerd event")

// errHolderPending: a conflict whose holder's own sync has not yet told
// whether the holder still runs (it may be stopping right now, or gone
// while nobody listened); the holder is synced and the conflict decided on
// the next attempt.
var errHolderPending = errors.New("waiting for the pod holding the host port to be checked")

// retry says whether a failed piece of work is tried again.
type retry int

const (
	retryNever   retry = iota // final: retrying cannot help
	retryBounded              // unclassified: a few tries (config.UnclassifiedAttempts), then the next resync
	retryAlways               // passes by itself (HNS unreachable, a holder being checked): while the work matters
)

// errorKind is one row of the table: how the plugin treats an error
// wherever it is asked.
type errorKind struct {
	retry retry
	// class is the operation's result in the metrics (Class* constants).
	class string
	// reason tells the pod's owners why mapping failed (Reason*); "" when
	// it is not their business (the sandbox went away, a retry decides).
	reason string
	// quiet: not a failure of the work (a reconcile does not count it as
	// failed).
	quiet bool
	// counted: the operation is counted in the metrics (an application
	// container's events are not the plugin's operations).
	counted bool
	// level and says: how a final outcome is logged.
	level logrus.Level
	says  string
	// quietRetry: a retry for it is logged at debug level (it is
	// expected), not as a warning.
	quietRetry bool
	// byNamespace: the pod's namespace's labels decide it (its Pod
	// Security level): when they change, the pod is synced again at once.
	byNamespace bool
	// byPolicy: the NetworkPolicies decide it: when they change, the pod
	// is synced again at once
	byPolicy bool
	// starts: a runtime's RunPodSandbox is not failed for it (the pod runs
	// without the host ports, and is told why), as it runs on containerd's
	// event path; a policy that changes later unmaps a running pod alike
	starts bool
}

// row is one row of the table: which errors, and their kind.
type row struct {
	is   func(error) bool
	kind errorKind
}

func is(target error) func(error) bool { return func(err error) bool { return errors.Is(err, target) } }

// rejected is the kind of a pod's request refused for good.
func rejected(class, reason string) errorKind {
	return errorKind{retry: retryNever, class: class, reason: reason, counted: true, level: logrus.ErrorLevel, says: "port mappings rejected"}
}

// byPolicy marks a row as decided by the NetworkPolicies: the pod starts,
// its host ports unmapped.
func byPolicy(k errorKind) errorKind {
	k.byPolicy, k.starts = true, true
	return k
}

// byNamespace marks a row as decided by the pod's namespace's labels.
func byNamespace(k errorKind) errorKind {
	k.byNamespace = true
	return k
}

// errorTable is every error the plugin tells apart, first match wins.
// Every question about an error (retry it? which metric? what do the
// owners read? how is it logged? is it counted?) is answered from it,
// through kindOf. What HNS errors mean is hcn's own table (hcn/errors.go):
// here they are rows by their kind (hcn.Retryable, hcn.Permanent).
var errorTable = []row{
	{is(ErrClosed), errorKind{retry: retryNever, class: ClassError, quiet: true, counted: true, level: logrus.DebugLevel, says: "not done: the plugin is stopping"}},
	{is(context.Canceled), errorKind{retry: retryNever, class: ClassError, quiet: true, counted: true, level: logrus.DebugLevel, says: "not done: the plugin is stopping"}},
	{is(ErrUndecodableEvent), errorKind{retry: retryNever, quiet: true, level: logrus.WarnLevel, says: "undecodable containerd event: ignored"}},
	{is(ErrNotSandbox), errorKind{retry: retryNever, quiet: true, level: logrus.DebugLevel, says: "not a sandbox"}},
	{is(ErrSandboxNotFound), errorKind{retry: retryNever, class: ClassError, quiet: true, counted: true, level: logrus.DebugLevel, says: "container gone before its start was handled"}},
	{hcn.NamespaceGone, errorKind{retry: retryNever, class: ClassError, quiet: true, counted: true, level: logrus.InfoLevel, says: "sandbox stopped before its endpoint could be attached; nothing left behind"}},
	{is(errHolderPending), errorKind{retry: retryAlways, class: ClassError, counted: true, level: logrus.WarnLevel, says: "waiting for the holder of a host port", quietRetry: true}},
	{is(ErrHyperV), rejected(ClassHyperV, ReasonHyperV)},
	{is(request.ErrBadMetadata), errorKind{retry: retryNever, class: ClassError, reason: ReasonHostPortsUnknown, quiet: true, counted: true, level: logrus.WarnLevel, says: "containerd's record of the sandbox does not decode"}},
	{is(ErrInvalidPod), rejected(ClassInvalid, ReasonInvalid)},
	{is(admission.ErrDenied), rejected(ClassDenied, ReasonDenied)},
	{is(admission.ErrPodSecurity), byNamespace(rejected(ClassDenied, ReasonPodSecurity))},
	// the API server not reached yet: waited out while the pod is live,
	// never granted meanwhile
	{is(admission.ErrLevelUnknown), byNamespace(errorKind{retry: retryAlways, class: ClassDenied, reason: ReasonPodSecurityUnknown, counted: true,
		level: logrus.WarnLevel, says: "host ports held back: the namespace's Pod Security level is not known yet"})},
	{is(admission.ErrNetworkPolicy), byPolicy(rejected(ClassDenied, ReasonNetworkPolicy))},
	// the policies not known (not read, too old, a kind not evaluated):
	// nothing new granted; the pod is synced again when they change
	{is(admission.ErrNetworkPolicyUnknown), byPolicy(errorKind{retry: retryNever, class: ClassDenied, reason: ReasonNetworkPolicyUnknown,
		counted: true, level: logrus.WarnLevel, says: "host ports held back: the NetworkPolicies that may select the pod are not known"})},
	{is(ErrPortConflict), rejected(ClassConflict, ReasonConflict)},
	// a program of the node holds the port: the pod's owner is told which;
	// each resync judges the pod again (the program may have stopped)
	{is(hostsockets.ErrHeld), rejected(ClassConflict, ReasonHeldByNode)},
	// containerd not answering (restarting, overloaded): waited out while
	// the work matters, told as containerd's, not HNS's
	{is(ErrContainerd), errorKind{retry: retryAlways, class: ClassError, reason: ReasonContainerd, counted: true, level: logrus.ErrorLevel,
		says: "containerd did not answer; retrying"}},
	{is(ErrDeadline), errorKind{retry: retryNever, class: ClassDeadline, reason: ReasonHNS, counted: true, level: logrus.WarnLevel, says: "HCN slower than the deadline"}},
	{is(hcn.ErrPortInUse), rejected(ClassConflict, ReasonConflict)},
	{hcn.Retryable, errorKind{retry: retryAlways, class: ClassError, reason: ReasonHNS, counted: true, level: logrus.ErrorLevel, says: "endpoint not built; retrying"}},
	{hcn.RetriesFew, errorKind{retry: retryBounded, class: ClassError, reason: ReasonHNS, counted: true, level: logrus.ErrorLevel,
		says: "endpoint not built after a few tries; the resync will retry"}},
	{hcn.Permanent, errorKind{retry: retryNever, class: ClassError, reason: ReasonHNS, counted: true, level: logrus.ErrorLevel, says: "endpoint not built; the resync will retry"}},
}

// FailureReasons are the reasons a pod's owners may be told its host
// ports failed with, every one the table gives, in its order: the
// pods_failing gauge has each from the start, at zero while no pod fails
// with it.
func FailureReasons() []string {
	var out []string
	for _, r := range append(errorTable, row{kind: unclassified}) {
		if r.kind.reason != "" && !slices.Contains(out, r.kind.reason) {
			out = append(out, r.kind.reason)
		}
	}
	return out
}

// unclassified is the row of an error no other row matches: HNS failing in
// a way nobody has mapped (E_FAIL).
var unclassified = errorKind{retry: retryBounded, class: ClassError, reason: ReasonHNS, counted: true, level: logrus.ErrorLevel,
	says: "failing in a way the plugin does not know; giving up until the next resync"}

// refusal says whether the row refuses the pod what it asks (its request,
// the node's or the cluster's rules, another holder of its ports), as
// opposed to failing to do the work (containerd, HNS, the deadline): a
// Hyper-V pod refused keeps its network, without host ports.
func (k errorKind) refusal() bool {
	switch k.class {
	case ClassInvalid, ClassDenied, ClassConflict, ClassHyperV:
		return true
	}
	return k.starts
}

// kindOf is err's row of the table; nil is success.
func kindOf(err error) errorKind {
	if err == nil {
		return errorKind{retry: retryNever, class: ClassOK, counted: true, level: logrus.DebugLevel}
	}
	for _, r := range errorTable {
		if r.is(err) {
			return r.kind
		}
	}
	return unclassified
}

// retries reports whether work that failed with err on its attempt-th
// try (1 for the first) is tried again.
func retries(err error, attempt int) bool {
	switch kindOf(err).retry {
	case retryAlways:
		return true
	case retryBounded:
		return attempt < config.UnclassifiedAttempts
	}
	return false
}

// Reconnects reports whether an event source whose connection broke with
// err connects again: always, unless the table says err is final (the
// plugin or the source closed). A runtime or containerd restarting, a
// socket not there yet: unclassified, reconnected with backoff for ever.
func Reconnects(err error) bool {
	k := kindOf(err)
	return err == nil || k == unclassified || k.retry != retryNever
}

// Passes reports whether err passes by itself (HNS not answering yet, as
// at boot): waited out for as long as the work matters, never given up on.
func Passes(err error) bool { return err != nil && kindOf(err).retry == retryAlways }

// Said is how err is logged where it is the last word on something (the
// table's level and words).
func Said(err error) (logrus.Level, string) {
	k := kindOf(err)
	return k.level, k.says
}

// Classify is an operation's result for the metrics.
func Classify(err error) string { return kindOf(err).class }

// failureReason is why err failed the pod's mappings, "" when it is not the
// pod owner's business.
func failureReason(err error) string { return kindOf(err).reason }

// verdict is what a sync's outcome means, read off the table once: the
// error naming the pod, its row, and whether it is tried again.
type verdict struct {
	err   error
	kind  errorKind
	again bool
}

// judge names the pod in err once and reads its row: every reader of a
// sync's failure (the retry, the commit, the owners' report, the gauge,
// the log line) takes it from here. A core that is closing retries
// nothing.
func judge(p Pod, err error, attempt int, closing bool) verdict {
	err = errPod(p, err)
	return verdict{err: err, kind: kindOf(err), again: err != nil && !closing && retries(err, attempt)}
}

// errPod wraps err with the pod it concerns.
func errPod(p Pod, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("pod %s: %w", p, err)
}
