package plugin

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/workqueue"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/hostsockets"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

// Options configure a Core.
type Options struct {
	Policy request.PolicyOptions
	Inputs Inputs // where a pod's port mappings are read from
	// Limits bound one pod's request.
	Limits    request.Limits
	Admission *admission.Policy // nil: admit everything
	// Deadline bounds the HCN work a pod start may hold up the runtime for.
	Deadline time.Duration
	// FailOpen: when HCN misses the deadline the pod proceeds and the
	// endpoint is completed in the background; otherwise the pod fails and
	// what was started is rolled back.
	FailOpen bool
	// RetryMin and RetryMax bound the backoff between retries of
	// transient HCN failures.
	RetryMin, RetryMax time.Duration
	// Observer is told what happens (metrics); nil: nobody.
	Observer Observer
	// Reporter tells pods' owners (Kubernetes); nil: nobody.
	Reporter Reporter
	// HyperVHandlers are CRI runtime handlers that run Hyper-V isolated
	// pods, besides what the container record and the spec tell
	// (plugin.hyperv_runtime_handlers; its default lives in config).
	HyperVHandlers []string
	// NodeNetwork: the plugin serves hcsshim's NodeNetworkService
	// (hyperv.node_network_service): a Hyper-V pod whose network ncproxy
	// asks it to set up is mapped (SetUpHyperV), and one whose endpoint of
	// ours HNS holds is kept; otherwise Hyper-V pods are refused.
	NodeNetwork bool
	// ShutdownGrace bounds how long Close waits for work in flight (a
	// HostProcess pod gets about 5 s to stop); what is left is finished by
	// the next start's reconcile.
	ShutdownGrace time.Duration
	// LateBound is how long the ports a given-up HNS call asked for stay
	// held while HNS does not show what it made (config.LateCallTimeouts
	// of hcn.call_timeout).
	LateBound time.Duration
	// Workers bounds the sandboxes worked on at once.
	Workers int
	// Sockets reads the node's own sockets: a host port a program of the
	// node holds is never mapped (a WinNAT mapping would take its
	// traffic). nil: not read.
	Sockets hostsockets.Reader
	// limiter is the queue's rate limiter; nil: the one retry rule,
	// backoff.QueueLimiter from RetryMin to RetryMax (tests record the
	// delays theirs gives).
	limiter workqueue.TypedRateLimiter[string]
	// clock is the time (nil: the wall clock; tests set their own)
	clock func() time.Time
}

// Core is the controller: every event source's triggers go into its one
// queue, keyed by sandbox ID, and one sync per sandbox (sync.go) reads what
// should be and what is and converges. It owns the one state of every
// sandbox (state.go). It is safe for concurrent use: syncs of one sandbox
// never overlap, different sandboxes proceed in parallel.
type Core struct {
	mgr     *hcn.Manager
	store   SandboxStore
	opt     Options
	log     *logrus.Entry
	st      *state
	q       workqueue.TypedRateLimitingInterface[string]
	workers sync.WaitGroup
	closing atomic.Bool
	closed  chan struct{}                    // closed when the queue shuts down: waiters are told ErrClosed
	policy  atomic.Pointer[admission.Policy] // replaced by a config reload
	// labels is the namespaces' Pod Security labels as package kube's
	// watch last published them (SetLabels); nil: they cannot be read
	// (kubernetes.enabled = false), and where the policy checks Pod
	// Security the annotation is refused
	labels atomic.Pointer[admission.Labels]
	// netpols is the NetworkPolicies as package kube's cache last
	// published them (SetNetworkPolicies); nil: they cannot be read
	netpols atomic.Pointer[admission.NetworkPolicies]
	// inputsGen counts the changes of the policy and the labels: a sync
	// whose inputs changed before it committed is decided again
	inputsGen atomic.Uint64

	bg        context.Context // lifetime of background work
	stop      context.CancelFunc
	bgWork    sync.WaitGroup
	closeOnce sync.Once
}

// SetAdmission replaces the admission policy: every mapping not in place
// from now on is judged by it (a sync that decided with the one before and
// commits after this is decided again); mappings in place stay.
func (c *Core) SetAdmission(p *admission.Policy) {
	c.policy.Store(p)
	c.inputsGen.Add(1)
}

// SetLabels replaces the namespaces' labels each sync decides with, as the
// API server last said them (package kube publishes them after every list
// and event); a sync ages them as of its start.
func (c *Core) SetLabels(l admission.Labels) {
	c.labels.Store(&l)
	c.inputsGen.Add(1)
}

// SetNetworkPolicies replaces the NetworkPolicies each sync decides with,
// as the API server last said them (package kube publishes them after
// every change); a sync ages them as of its start.
func (c *Core) SetNetworkPolicies(n admission.NetworkPolicies) {
	c.netpols.Store(&n)
	c.inputsGen.Add(1)
}

// now is the core's clock.
func (c *Core) now() time.Time {
	if c.opt.clock != nil {
		return c.opt.clock()
	}
	return time.Now()
}

// shutdownQueue stops taking work and lets the workers finish the syncs
// that run; whoever waits for work that will not run is told ErrClosed.
func (c *Core) shutdownQueue() {
	c.closing.Store(true)
	close(c.closed)
	c.q.ShutDown()
	c.workers.Wait()
}

// Observer returns the core's observer.
func (c *Core) Observer() Observer { return c.opt.Observer }

// Close stops taking work and waits, at most ShutdownGrace, for what runs:
// the work queue's current attempts (each finishes its HCN calls, or rolls
// back) and the background work started with Go. What has not started, or
// not finished by then, is left to the next start's reconcile (endpoints
// are recognised by name).
func (c *Core) Close() {
	c.closeOnce.Do(func() {
		c.stop()
		done := make(chan struct{})
		go func() {
			c.shutdownQueue()
			c.bgWork.Wait()
			close(done)
		}()
		t := time.NewTimer(c.opt.ShutdownGrace)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			c.log.WithField("grace", c.opt.ShutdownGrace.String()).
				Warn("HCN work still in flight at shutdown is left to the next start's reconcile")
		}
	})
}

// Go runs fn in the background until the core closes; Close waits for it.
func (c *Core) Go(fn func(ctx context.Context)) {
	c.bgWork.Add(1)
	go func() {
		defer c.bgWork.Done()
		fn(c.bg)
	}()
}

// Endpoints is how many sandboxes have an endpoint of ours, as far as the
// controller knows (a metric).
func (c *Core) Endpoints() int { return c.st.endpointCount() }

// Failing counts the pods whose mappings fail now, by the reason their
// owners are told (Reason* constants).
func (c *Core) Failing() map[string]int { return c.st.failing() }

// PodLog is the core's logger with the pod's fields (pod, namespace,
// sandbox).
func (c *Core) PodLog(p Pod) *logrus.Entry {
	return c.log.WithFields(logrus.Fields{"pod": p.Name, "namespace": p.Namespace, "sandbox": p.ID})
}
