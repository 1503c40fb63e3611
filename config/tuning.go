package config

import "time"

// Timings and sizes that no configuration key sets, written once here
// beside the keys' defaults (Default): the packages that use them take
// them from here, none keeps a default of its own.
const (
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
	// HealthCheckTimeout bounds each check of /healthz and /livez.
	HealthCheckTimeout = 2 * time.Second
	// StartRetryMin and StartRetryMax bound the wait between tries to
	// start while HNS does not answer yet (a boot).
	StartRetryMin = time.Second
	StartRetryMax = 30 * time.Second
	// AdminClientTimeout bounds a command's request to the running
	// plugin's admin endpoint (status, health, reload).
	AdminClientTimeout = 10 * time.Second
)
