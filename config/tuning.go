package config

import "time"

// Timings and sizes that no configuration key sets, written once here
// beside the keys' defaults (Default): the packages that use them take
// them from here, none keeps a default of its own.
const (
	// GCPercent is the plugin's GOGC unless the environment sets one: the
	// heap grows by half its live size between collections, not by all
	// of it. The live heap is small (about 5 MiB at 1,000 endpoints) and
	// the garbage comes in bursts (a reconcile reads every sandbox's
	// record), so the peak is mostly garbage: measured with the bench's
	// Synchronize of 1,000 pods (test/bench), the plugin peaked at 39.4 to
	// 40.9 MiB RSS at Go's default of 100, 37.3 to 38.0 MiB at 50.
	GCPercent = 50
	// SyncRetryMin is the first wait before a sandbox's failed sync is
	// tried again (hcn.retry_max caps the doubling).
	SyncRetryMin = 100 * time.Millisecond
	// SyncWorkers bounds the sandboxes worked on at once: above
	// hcn.max_concurrent_calls's default, so that the cap and not the
	// workers bounds the work.
	SyncWorkers = 16
	// SyncBound bounds one sync's work (each HNS and containerd call is
	// bounded on its own): a guard against a hang.
	SyncBound = time.Minute
	// ResyncBound bounds one full reconcile.
	ResyncBound = 5 * time.Minute
	// ReconnectMin is the first wait before an event source (NRI,
	// containerd's events) connects again (nri.reconnect_max caps it).
	ReconnectMin = 500 * time.Millisecond
	// APICallTimeout bounds one request to the API server; APIRetryMin and
	// APIRetryMax bound the wait between tries of a report, a list or a
	// watch.
	APICallTimeout = 5 * time.Second
	APIRetryMin    = 200 * time.Millisecond
	APIRetryMax    = 10 * time.Second
	// NamespaceWatchTimeout is how long a namespace watch is asked to
	// stay open (client-go's reflector asks 5 to 10 minutes; shorter
	// where kubernetes.labels_max_age is), and NamespaceWatchGrace how
	// long past that the plugin waits before it ends a watch that stayed
	// open and silent itself.
	NamespaceWatchTimeout = 5 * time.Minute
	NamespaceWatchGrace   = 15 * time.Second
	// PolicyKindsEvery is how often the API server is asked which policy
	// kinds it serves (discovery; half kubernetes.labels_max_age where
	// that is shorter): a kind installed later refuses host ports from
	// then on.
	PolicyKindsEvery = time.Minute
	// HealthCheckTimeout bounds each check of /healthz and /livez.
	HealthCheckTimeout = 2 * time.Second
	// StartRetryMin and StartRetryMax bound the wait between tries to
	// start while HNS does not answer yet (a boot).
	StartRetryMin = time.Second
	StartRetryMax = 30 * time.Second
	// AdminClientTimeout bounds a command's request to the running
	// plugin's admin endpoint (health, reload, status, cleanup, doctor).
	AdminClientTimeout = 10 * time.Second
	// AdminReadHeaderTimeout bounds how long the admin endpoints (and
	// pprof, and the simulator) wait for a request's headers;
	// AdminShutdownGrace how long they finish answering once stopping.
	AdminReadHeaderTimeout = 5 * time.Second
	AdminShutdownGrace     = 2 * time.Second

	// UnclassifiedAttempts bounds the tries of a sync that fails with an
	// error nobody has classified: it is reported failed after that (the
	// resync tries again), instead of hammering HNS forever.
	UnclassifiedAttempts = 5
	// RetryJitter spreads each retry delay d over [d, d·(1+RetryJitter)),
	// so that many retries started by one hiccup do not come back in one
	// wave; RetriesPerSecond and RetryBurst bound the retries of a work
	// queue across all its keys (client-go's controller default).
	RetryJitter      = 0.4
	RetriesPerSecond = 10
	RetryBurst       = 100
	// ReconnectStableFor is how many times nri.reconnect_max a
	// connection must have lasted for its next reconnect to start its
	// backoff over.
	ReconnectStableFor = 10

	// NRIRegistrationWait is how long plugin.source = "auto" waits for
	// NRI to accept the plugin before it follows containerd's events:
	// above NRI's 5 s registration timeout.
	NRIRegistrationWait = 6 * time.Second
	// ContainerdCallTimeout bounds dialling containerd and each call the
	// event source makes to it (the subscription probe);
	// SubscriptionProbeEvery is how often that probe is published until
	// it comes back; ContainerdPingTimeout bounds a command's check that
	// containerd answers (status).
	ContainerdCallTimeout  = 5 * time.Second
	SubscriptionProbeEvery = 250 * time.Millisecond
	ContainerdPingTimeout  = 2 * time.Second

	// EndpointPrefix starts the name of every endpoint the plugin owns;
	// the rest is the sandbox ID, so removal works from the ID alone.
	EndpointPrefix = "nri-hcn-portmap-"
	// HNSListingAttempts bounds how often a listing of endpoints is taken
	// again after it raced a deletion (hcsshim's listing fails whole).
	HNSListingAttempts = 3
	// LateCallTimeouts is how many hcn.call_timeout the host ports an HNS
	// call given up on asked for stay held, from the give-up, while HNS
	// does not show what it made: a create HNS finishes late lands as an
	// endpoint of the sandbox's, which its next sync deletes (stopped,
	// refused) or takes (live, admitted); one that has not landed by then
	// is taken as never landing (a hold longer than this keeps the port
	// from the next pod for nothing when HNS dropped the call), and a late
	// one after that is an orphan the resync removes.
	LateCallTimeouts = 2
	// CleanupBound bounds the whole of `cleanup`.
	CleanupBound = 5 * time.Minute

	// APIReportAttempts bounds the tries of a report to the API server
	// that fails in a way that may pass; ReportsRemembered bounds the
	// pods the reporter remembers having told (forgetting costs one
	// repeated report); APIListPage is how many objects one list
	// request reads.
	APIReportAttempts = 5
	ReportsRemembered = 8192
	APIListPage       = 500

	// ServiceProgressEvery is how often a stopping service tells the SCM
	// it is still making progress; ServiceRecovery are the delays of the
	// SCM's restarts after failures (the last repeats), forgotten after
	// ServiceRecoveryReset without one.
	ServiceProgressEvery = 2 * time.Second
	ServiceRecoveryReset = 24 * time.Hour
	// UninstallStopWait bounds how long uninstall waits for the service
	// to stop (it rolls back in-flight HNS work), UninstallGoneWait for the
	// SCM to remove it, polling every UninstallPoll.
	UninstallStopWait = 30 * time.Second
	UninstallGoneWait = 10 * time.Second
	UninstallPoll     = 500 * time.Millisecond
)

// ServiceRecovery are the delays of the SCM's restarts of the service
// after its first, second and later failures.
func ServiceRecovery() []time.Duration {
	return []time.Duration{5 * time.Second, 10 * time.Second, 30 * time.Second}
}
