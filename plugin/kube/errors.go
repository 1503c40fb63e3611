package kube

import (
	"errors"
	"net/http"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"

	"github.com/sirupsen/logrus"
)

// Errors of the API server, as the reporter and the namespace cache meet
// them: every failed request wraps one of these, and the table below says
// what each means for the work.
var (
	// ErrGone: the pod (or its namespace) is gone: nothing to report to.
	ErrGone = errors.New("the API server no longer has the object")
	// ErrRefused: the API server refused the request as invalid (a bad
	// object, admission, a precondition): a retry cannot help.
	ErrRefused = errors.New("the API server refused the request")
	// ErrDenied: the API server did not let the plugin do it (401, 403):
	// its RBAC or its token, which may pass (a token rotated, an API server
	// whose authorizer is still starting): a few tries.
	ErrDenied = errors.New("the API server denied the plugin the request")
	// ErrUnavailable: the API server did not answer, is overloaded (429,
	// 5xx) or timed out: a retry may help.
	ErrUnavailable = errors.New("the API server is unavailable")
)

// ErrWatchSilent: a watch stayed open past the timeout it asked for
// without a word (no event, no bookmark): a silent connection is not news,
// so what is held is no longer current, and the namespaces are listed
// again.
var ErrWatchSilent = errors.New("the watch stayed open past its timeout")

// ErrAPI: the API server answered a request with an error status. Each
// such error also wraps its kind (ErrGone, ErrRefused, ErrDenied,
// ErrUnavailable), which the table judges.
var ErrAPI = errors.New("API server refused the request")

// kindOfStatus is the kind of an HTTP status from the API server: gone
// (404, 410), denied (401, 403: RBAC or the token, a few tries: an API
// server just restarted may deny before its authorizer has synced),
// unavailable (408, 429, 5xx: retried), refused for good (any other 4xx:
// a bad object, admission, a failed precondition: 409).
func kindOfStatus(code int) error {
	switch code {
	case http.StatusNotFound, http.StatusGone:
		return ErrGone
	case http.StatusUnauthorized, http.StatusForbidden:
		return ErrDenied
	case http.StatusRequestTimeout, http.StatusTooManyRequests:
		return ErrUnavailable
	}
	if code >= 500 {
		return ErrUnavailable
	}
	return ErrRefused
}

// errorKind is one row of the table: how a failed request is treated.
type errorKind struct {
	retry bool // a report is tried again, up to config.APIReportAttempts (then dropped: the next outcome is reported again)
	// final: the outcome counts as told (a refusal for good: no resync
	// sends it again)
	final bool
	// relist: a watch that ends with it is followed by a list at once,
	// and it is not a failure; stale: what is held is no longer current
	// meanwhile (it ages from the API server's last word as always)
	relist, stale bool
	level         logrus.Level // how a report given up on is logged
	says          string
	// check is what an operator checks, said with a failing list or
	// watch of namespaces (logged as an error then, not a warning)
	check string
}

// errorTable is every API server error the package tells apart, first
// match wins; anything else is unclassified (retried, bounded).
var errorTable = []struct {
	err  error
	kind errorKind
}{
	{ErrExpired, errorKind{relist: true, level: logrus.DebugLevel, says: "the watch's resource version is too old: listing again"}},
	{ErrWatchSilent, errorKind{relist: true, stale: true, level: logrus.WarnLevel, says: "the watch stayed open past its timeout: listing again"}},
	{ErrGone, errorKind{final: true, level: logrus.DebugLevel, says: "not reported: the pod is gone"}},
	{ErrRefused, errorKind{final: true, level: logrus.ErrorLevel, says: "not reported: the API server refused it"}},
	{ErrDenied, errorKind{retry: true, level: logrus.ErrorLevel, says: "not reported: the API server denied it (check the plugin's RBAC and token)",
		check: "the plugin's ClusterRole needs list and watch on"}},
	{ErrUnavailable, errorKind{retry: true, level: logrus.ErrorLevel, says: "not reported: the API server did not take it"}},
}

var unclassified = errorKind{retry: true, level: logrus.ErrorLevel, says: "not reported: failing in a way the plugin does not know"}

// kindOf is err's row of the table.
func kindOf(err error) errorKind {
	for _, r := range errorTable {
		if errors.Is(err, r.err) {
			return r.kind
		}
	}
	return unclassified
}

// retries reports whether a report that failed with err on its attempt-th
// try (1 for the first) is tried again.
func retries(err error, attempt int) bool {
	return kindOf(err).retry && attempt < config.APIReportAttempts
}
