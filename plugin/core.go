// Package plugin is the core of nri-hcn-portmap: it turns a pod sandbox into
// the HCN endpoint it should have, removes it when the pod goes, reconciles
// HCN against containerd, and hosts the event sources (NRI) that drive it.
package plugin

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
)

// Pod is what an event source knows of a pod sandbox.
type Pod struct {
	ID          string // sandbox ID = containerd container ID
	Name        string
	Namespace   string // Kubernetes namespace
	UID         string
	Annotations map[string]string
	Labels      map[string]string
	// Partial: only the ID is known (a containerd event, a resync, an
	// orphan); name, namespace and annotations are read from containerd's
	// CRI sandbox metadata.
	Partial bool

	// parsed: annotated holds the annotation's mappings, parsed once on
	// the pod start's fast path and carried through retries.
	parsed    bool
	annotated []hcn.PortMapping
}

func (p Pod) String() string {
	if p.Name == "" {
		return "sandbox " + p.ID
	}
	return p.Namespace + "/" + p.Name
}

// errNotSandbox: a container event or listing named an application
// container, not a CRI sandbox; there is nothing to do for it.
var errNotSandbox = errors.New("not a CRI sandbox container")

// ErrInvalidPod wraps errors caused by the pod's own request (a bad
// annotation, a hostPort HNS cannot honour): retrying will not help.
var ErrInvalidPod = errors.New("invalid pod request")

// MappingSources says where port mappings come from.
type MappingSources struct {
	Annotations bool // the hcn.nri.io/port-mappings annotation
	CRI         bool // Kubernetes hostPort, from containerd's CRI sandbox metadata
}

// Options configure a Core.
type Options struct {
	Policy  hcn.PolicyOptions
	Sources MappingSources
	// Limits bound one pod's request (zero values: the defaults).
	Limits    Limits
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
}

// Core holds the logic shared by every event source. It is safe for
// concurrent use: work for one sandbox is serialized, different sandboxes
// proceed in parallel.
type Core struct {
	mgr     *hcn.Manager
	store   SandboxStore
	opt     Options
	log     *logrus.Entry
	locks   keyLock
	ports   *portIndex
	pending pendingOps
	policy  atomic.Pointer[admission.Policy] // replaced by a config reload

	bg     context.Context // lifetime of background work
	stop   context.CancelFunc
	bgWork sync.WaitGroup
}

// NewCore wires a core.
func NewCore(mgr *hcn.Manager, store SandboxStore, opt Options, log *logrus.Entry) *Core {
	if opt.Deadline <= 0 {
		opt.Deadline = 1500 * time.Millisecond
	}
	if opt.RetryMin <= 0 {
		opt.RetryMin = 100 * time.Millisecond
	}
	if opt.RetryMax < opt.RetryMin {
		opt.RetryMax = max(opt.RetryMin, 10*time.Second)
	}
	if opt.Observer == nil {
		opt.Observer = nopObserver{}
	}
	if opt.Limits.MaxMappings <= 0 {
		opt.Limits.MaxMappings = DefaultMaxMappings
	}
	if opt.Limits.MaxBytes <= 0 {
		opt.Limits.MaxBytes = DefaultMaxBytes
	}
	bg, stop := context.WithCancel(context.Background())
	c := &Core{mgr: mgr, store: store, opt: opt, log: log, ports: newPortIndex(), bg: bg, stop: stop}
	c.policy.Store(opt.Admission)
	return c
}

// SetAdmission replaces the admission policy; pods admitted before keep
// their endpoints (the policy applies to new pods).
func (c *Core) SetAdmission(p *admission.Policy) { c.policy.Store(p) }

// Observer returns the core's observer.
func (c *Core) Observer() Observer { return c.opt.Observer }

// Close stops background work (retries of fail-open starts) and waits for
// it; work in progress finishes its current HCN call or rolls back.
func (c *Core) Close() {
	c.stop()
	c.bgWork.Wait()
}

// Manager returns the HCN manager.
func (c *Core) Manager() *hcn.Manager { return c.mgr }

func (c *Core) podLog(p Pod) *logrus.Entry {
	return c.log.WithFields(logrus.Fields{"pod": p.Name, "namespace": p.Namespace, "sandbox": p.ID})
}

// Mappings returns the port mappings the pod's annotation asks for; an
// invalid request (or one over the limits) is an error naming the pod, the
// annotation and the entry (or the count and the limit), wrapping
// ErrInvalidPod. A pod whose annotation was parsed already is not parsed
// again.
func (c *Core) Mappings(p Pod) ([]hcn.PortMapping, error) {
	if p.parsed {
		return p.annotated, nil
	}
	v, ok := p.Annotations[AnnotationPortMappings]
	if !ok {
		return nil, nil
	}
	ms, err := ParsePortMappings(v, c.opt.Limits)
	if err != nil {
		return nil, fmt.Errorf("pod %s: annotation %s: %w: %w", p, AnnotationPortMappings, ErrInvalidPod, err)
	}
	return ms, nil
}

// resolved is a sandbox with everything needed to act on it.
type resolved struct {
	pod      Pod
	sb       *SandboxInfo
	mappings []hcn.PortMapping
	known    bool // the pod's request is known (false: partial pod without CRI metadata)
}

// resolve reads the sandbox from containerd, completes a partial pod from
// the CRI metadata and works out the mappings from the enabled sources.
func (c *Core) resolve(ctx context.Context, p Pod) (*resolved, error) {
	sb, err := c.store.Sandbox(ctx, p.ID)
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", p, err)
	}
	r := &resolved{pod: p, sb: sb, known: !p.Partial}
	if p.Partial && !sb.IsSandbox {
		return r, fmt.Errorf("container %s: %w", p.ID, errNotSandbox)
	}
	var meta *CRIMetadata
	if len(sb.Metadata) > 0 && (p.Partial || c.opt.Sources.CRI) {
		if meta, err = DecodeCRIMetadata(sb.Metadata); err != nil {
			return r, fmt.Errorf("pod %s: %w: %w", p, ErrInvalidPod, err)
		}
		if p.Partial {
			r.pod = Pod{ID: p.ID, Name: meta.PodName, Namespace: meta.PodNamespace, UID: meta.PodUID,
				Annotations: meta.Annotations, Labels: meta.Labels}
			r.known = true
		}
	}
	if !r.known {
		return r, nil
	}
	var ann []hcn.PortMapping
	if c.opt.Sources.Annotations {
		if ann, err = c.Mappings(r.pod); err != nil {
			return r, err
		}
	}
	r.mappings = ann
	if c.opt.Sources.CRI && meta != nil {
		cri, err := meta.HostPorts(c.opt.Limits)
		if err == nil {
			r.mappings, err = MergeMappings(ann, cri, c.opt.Limits)
		}
		if err != nil {
			return r, fmt.Errorf("pod %s: %w: %w", r.pod, ErrInvalidPod, err)
		}
	}
	if pol := c.policy.Load(); pol != nil {
		if err := pol.Admit(admission.Pod{Namespace: r.pod.Namespace, Labels: r.pod.Labels}, r.mappings); err != nil {
			c.podLog(r.pod).WithError(err).Warn("host ports denied")
			return r, fmt.Errorf("pod %s: %w", r.pod, err)
		}
	}
	return r, nil
}

// Result says what happened to one sandbox.
type Result int

// Results.
const (
	ResultNone      Result = iota // nothing to do (no mappings, no namespace)
	ResultUnchanged               // the right endpoint already existed
	ResultCreated                 // endpoint created (or replaced, or re-attached)
	ResultDeleted                 // endpoint(s) removed
)

// Ensure gives a started sandbox the endpoint it asks for. A pod without
// mappings, or whose sandbox has no Windows network namespace, is skipped.
// An invalid request fails before anything is created.
func (c *Core) Ensure(ctx context.Context, p Pod) (Result, error) {
	p, ok, err := c.needsWork(p)
	if !ok {
		return ResultNone, err
	}
	unlock := c.locks.lock(p.ID)
	defer unlock()
	return c.ensureLocked(ctx, p)
}

// needsWork is the fast path: when the annotation alone decides (the source
// gave us the pod's annotations, and Kubernetes hostPort is not read), a pod
// without one costs neither a containerd nor an HNS call. A bad annotation
// is reported here, before anything is created. The parsed mappings travel
// with the returned pod, so the annotation is parsed once per start.
func (c *Core) needsWork(p Pod) (Pod, bool, error) {
	if p.Partial || c.opt.Sources.CRI {
		return p, true, nil
	}
	ms, err := c.Mappings(p)
	if err != nil {
		return p, false, err
	}
	p.parsed, p.annotated = true, ms
	return p, len(ms) > 0, nil
}

// ensureLocked reads the sandbox and ensures its endpoint; the caller holds
// the pod's lock.
func (c *Core) ensureLocked(ctx context.Context, p Pod) (Result, error) {
	r, err := c.resolve(ctx, p)
	if err != nil {
		return ResultNone, err
	}
	return c.ensureResolved(ctx, r)
}

func (c *Core) ensureResolved(ctx context.Context, r *resolved) (Result, error) {
	log := c.podLog(r.pod)
	if r.sb.NetNS == "" {
		log.Info("sandbox has no Windows network namespace (Linux or HostProcess sandbox); skipped")
		return ResultNone, nil
	}
	if len(r.mappings) == 0 {
		return ResultNone, nil
	}
	policies := hcn.BuildPolicies(r.mappings, c.opt.Policy)
	name := ""
	if r.pod.Name != "" {
		name = r.pod.Namespace + "/" + r.pod.Name
	}
	undo, err := c.ports.reserve(r.pod.ID, name, policies)
	if err != nil {
		c.describeHolder(ctx, err)
		return ResultNone, fmt.Errorf("pod %s: %w", r.pod, err)
	}
	ep, outcome, err := c.mgr.Ensure(ctx, hcn.Desired{SandboxID: r.pod.ID, Namespace: r.sb.NetNS, Policies: policies})
	if err != nil {
		undo()
		return ResultNone, fmt.Errorf("pod %s: %w", r.pod, err)
	}
	log = log.WithFields(logrus.Fields{"endpoint": ep.ID, "netns": r.sb.NetNS})
	if outcome == hcn.Unchanged {
		log.Debug("endpoint already in place")
		return ResultUnchanged, nil
	}
	log.WithFields(logrus.Fields{"mappings": fmt.Sprint(r.mappings), "outcome": outcome.String()}).Info("endpoint attached")
	return ResultCreated, nil
}

// Remove deletes the sandbox's endpoints. It needs only the sandbox ID, works
// after containerd forgot the sandbox, and treats "already gone" as success.
func (c *Core) Remove(ctx context.Context, p Pod) (Result, error) {
	unlock := c.locks.lock(p.ID)
	defer unlock()
	return c.removeLocked(ctx, p)
}

func (c *Core) removeLocked(ctx context.Context, p Pod) (Result, error) {
	n, err := c.mgr.Remove(ctx, p.ID)
	if err != nil {
		return ResultNone, fmt.Errorf("pod %s: %w", p, err)
	}
	c.ports.release(p.ID)
	if n == 0 {
		return ResultNone, nil
	}
	c.podLog(p).WithField("endpoints", n).Info("endpoint removed")
	return ResultDeleted, nil
}

// live reports whether a sandbox is running, judged from containerd (its
// task, when there is one, is not stopped) and HCN (its namespace still
// exists). A sandbox without a Windows namespace is not live for us.
func (c *Core) live(ctx context.Context, sb *SandboxInfo) (bool, error) {
	if sb.NetNS == "" {
		return false, nil
	}
	state, err := c.store.TaskState(ctx, sb.ID)
	if err != nil {
		return false, err
	}
	if state == TaskStopped {
		return false, nil
	}
	return c.mgr.NamespaceExists(ctx, sb.NetNS)
}

// Summary counts what a reconcile did.
type Summary struct {
	Created, Deleted, Unchanged, Failed int
	Errors                              []error
}

func (s *Summary) add(r Result, err error) {
	switch {
	case err != nil:
		s.Failed++
		s.Errors = append(s.Errors, err)
	case r == ResultCreated:
		s.Created++
	case r == ResultDeleted:
		s.Deleted++
	case r == ResultUnchanged:
		s.Unchanged++
	}
}

// Reconcile converges HCN on the given pods and on every endpoint of ours:
// live pods with mappings get their endpoint, stopped or vanished pods lose
// theirs, and endpoints whose sandbox is gone are deleted. Endpoints of
// sandboxes not in pods are treated as partial pods (their request is read
// from containerd). Work runs on up to workers goroutines.
func (c *Core) Reconcile(ctx context.Context, pods []Pod, workers int) (Summary, error) {
	owned, err := c.mgr.Owned(ctx)
	if err != nil {
		return Summary{}, err
	}
	c.adoptPorts(owned)
	known := make(map[string]bool, len(pods)+len(owned))
	jobs := make([]Pod, 0, len(pods)+len(owned))
	for _, p := range pods {
		if !known[p.ID] {
			known[p.ID] = true
			jobs = append(jobs, p)
		}
	}
	for _, ep := range owned {
		id, _ := c.mgr.SandboxID(ep.Name)
		if !known[id] {
			known[id] = true
			jobs = append(jobs, Pod{ID: id, Partial: true})
		}
	}
	workers = max(1, min(workers, len(jobs)))
	var (
		mu  sync.Mutex
		sum Summary
		wg  sync.WaitGroup
		ch  = make(chan Pod)
	)
	for range workers {
		wg.Go(func() {
			for p := range ch {
				r, err := c.reconcileOne(ctx, p)
				mu.Lock()
				sum.add(r, err)
				mu.Unlock()
			}
		})
	}
	for _, p := range jobs {
		ch <- p
	}
	close(ch)
	wg.Wait()
	return sum, nil
}

// ReconcileAll reconciles every sandbox containerd knows and every endpoint
// of ours: the periodic resync and the repair after missed events.
func (c *Core) ReconcileAll(ctx context.Context, workers int) (Summary, error) {
	ids, err := c.store.ListSandboxes(ctx)
	if err != nil {
		return Summary{}, err
	}
	pods := make([]Pod, 0, len(ids))
	for _, id := range ids {
		pods = append(pods, Pod{ID: id, Partial: true})
	}
	return c.Reconcile(ctx, pods, workers)
}

func (c *Core) reconcileOne(ctx context.Context, p Pod) (Result, error) {
	unlock := c.locks.lock(p.ID)
	defer unlock()
	r, err := c.resolve(ctx, p)
	if errors.Is(err, ErrSandboxNotFound) {
		return c.removeLocked(ctx, p)
	}
	if r == nil {
		return ResultNone, err
	}
	live, lerr := c.live(ctx, r.sb)
	switch {
	case lerr != nil:
		return ResultNone, fmt.Errorf("pod %s: deciding whether the sandbox is live: %w", p, lerr)
	case !live:
		return c.removeLocked(ctx, r.pod)
	case errors.Is(err, errNotSandbox):
		return ResultNone, nil // not ours to decide
	case err != nil:
		return ResultNone, err // an invalid request: reported, nothing changed
	case !r.known:
		return ResultNone, nil // live, but its request is unknown here
	case len(r.mappings) == 0:
		return c.removeLocked(ctx, r.pod)
	}
	return c.ensureResolved(ctx, r)
}

func (c *Core) adoptPorts(owned []hcn.Endpoint) {
	for _, ep := range owned {
		if id, ok := c.mgr.SandboxID(ep.Name); ok {
			c.ports.adopt(id, ep.PortMappings)
		}
	}
}

// LoadPorts rebuilds the host-port index from the endpoints HCN holds (at
// start, so conflicts with pods started before a restart are caught).
func (c *Core) LoadPorts(ctx context.Context) error {
	owned, err := c.mgr.Owned(ctx)
	if err != nil {
		return err
	}
	c.adoptPorts(owned)
	return nil
}

// describeHolder fills in the holder's pod name from containerd when the
// index only knew its sandbox ID.
func (c *Core) describeHolder(ctx context.Context, err error) {
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.Holder != "" {
		return
	}
	sb, serr := c.store.Sandbox(ctx, ce.HolderID)
	if serr != nil || len(sb.Metadata) == 0 {
		return
	}
	if md, merr := DecodeCRIMetadata(sb.Metadata); merr == nil && md.PodName != "" {
		ce.Holder = md.PodNamespace + "/" + md.PodName
	}
}
