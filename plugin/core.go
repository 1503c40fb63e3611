// Package plugin is the core of nri-hcn-portmap: it turns a pod sandbox into
// the HCN endpoint it should have, removes it when the pod goes, reconciles
// HCN against containerd, and hosts the event sources (NRI) that drive it.
package plugin

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// Pod is what an event source knows of a pod sandbox.
type Pod struct {
	ID          string // sandbox ID = containerd container ID
	Name        string
	Namespace   string // Kubernetes namespace
	UID         string
	Annotations map[string]string
	// Partial: only the ID is known (a containerd event, a resync, an
	// orphan); name, namespace and annotations are read from containerd's
	// CRI sandbox metadata.
	Partial bool
}

func (p Pod) String() string {
	if p.Name == "" {
		return "sandbox " + p.ID
	}
	return p.Namespace + "/" + p.Name
}

// ErrInvalidPod wraps errors caused by the pod's own request (a bad
// annotation, a hostPort HNS cannot honour): retrying will not help.
var ErrInvalidPod = errors.New("invalid pod request")

// MappingSources says where port mappings come from.
type MappingSources struct {
	Annotations bool // the hcn.nri.io/port-mappings annotation
	CRI         bool // Kubernetes hostPort, from containerd's CRI sandbox metadata
}

// Core holds the logic shared by every event source. It is safe for
// concurrent use: work for one sandbox is serialized, different sandboxes
// proceed in parallel.
type Core struct {
	mgr     *hcn.Manager
	store   SandboxStore
	policy  hcn.PolicyOptions
	sources MappingSources
	log     *logrus.Entry
	locks   keyLock
}

// NewCore wires a core.
func NewCore(mgr *hcn.Manager, store SandboxStore, policy hcn.PolicyOptions, sources MappingSources, log *logrus.Entry) *Core {
	return &Core{mgr: mgr, store: store, policy: policy, sources: sources, log: log}
}

// Manager returns the HCN manager.
func (c *Core) Manager() *hcn.Manager { return c.mgr }

func (c *Core) podLog(p Pod) *logrus.Entry {
	return c.log.WithFields(logrus.Fields{"pod": p.Name, "namespace": p.Namespace, "sandbox": p.ID})
}

// Mappings returns the port mappings the pod's annotation asks for; an
// invalid request is an error naming the pod, the annotation and the entry,
// wrapping ErrInvalidPod.
func (c *Core) Mappings(p Pod) ([]hcn.PortMapping, error) {
	v, ok := p.Annotations[AnnotationPortMappings]
	if !ok {
		return nil, nil
	}
	ms, err := ParsePortMappings(v)
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
	var meta *CRIMetadata
	if len(sb.Metadata) > 0 && (p.Partial || c.sources.CRI) {
		if meta, err = DecodeCRIMetadata(sb.Metadata); err != nil {
			return r, fmt.Errorf("pod %s: %w: %w", p, ErrInvalidPod, err)
		}
		if p.Partial {
			r.pod = Pod{ID: p.ID, Name: meta.PodName, Namespace: meta.PodNamespace, UID: meta.PodUID, Annotations: meta.Annotations}
			r.known = true
		}
	}
	if !r.known {
		return r, nil
	}
	var ann []hcn.PortMapping
	if c.sources.Annotations {
		if ann, err = c.Mappings(r.pod); err != nil {
			return r, err
		}
	}
	r.mappings = ann
	if c.sources.CRI && meta != nil {
		cri, err := meta.HostPorts()
		if err == nil {
			r.mappings, err = MergeMappings(ann, cri)
		}
		if err != nil {
			return r, fmt.Errorf("pod %s: %w: %w", r.pod, ErrInvalidPod, err)
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
	if !p.Partial && !c.sources.CRI {
		// Fast path: the annotation alone decides; most pods have none and
		// cost neither a containerd nor an HNS call.
		ms, err := c.Mappings(p)
		if err != nil || len(ms) == 0 || !c.sources.Annotations {
			return ResultNone, err
		}
	}
	unlock := c.locks.lock(p.ID)
	defer unlock()
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
	policies := hcn.BuildPolicies(r.mappings, c.policy)
	ep, outcome, err := c.mgr.Ensure(ctx, hcn.Desired{SandboxID: r.pod.ID, Namespace: r.sb.NetNS, Policies: policies})
	if err != nil {
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
	case err != nil:
		return ResultNone, err // an invalid request: reported, nothing changed
	case !r.known:
		return ResultNone, nil // live, but its request is unknown here
	case len(r.mappings) == 0:
		return c.removeLocked(ctx, r.pod)
	}
	return c.ensureResolved(ctx, r)
}
