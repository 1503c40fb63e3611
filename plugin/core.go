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
}

func (p Pod) String() string {
	if p.Name == "" {
		return "sandbox " + p.ID
	}
	return p.Namespace + "/" + p.Name
}

// ErrInvalidPod wraps errors caused by the pod's own request (a bad
// annotation): retrying will not help.
var ErrInvalidPod = errors.New("invalid pod request")

// Core holds the logic shared by every event source. It is safe for
// concurrent use: work for one sandbox is serialized, different sandboxes
// proceed in parallel.
type Core struct {
	mgr    *hcn.Manager
	store  SandboxStore
	policy hcn.PolicyOptions
	log    *logrus.Entry
	locks  keyLock
}

// NewCore wires a core.
func NewCore(mgr *hcn.Manager, store SandboxStore, policy hcn.PolicyOptions, log *logrus.Entry) *Core {
	return &Core{mgr: mgr, store: store, policy: policy, log: log}
}

// Manager returns the HCN manager.
func (c *Core) Manager() *hcn.Manager { return c.mgr }

func (c *Core) podLog(p Pod) *logrus.Entry {
	return c.log.WithFields(logrus.Fields{"pod": p.Name, "namespace": p.Namespace, "sandbox": p.ID})
}

// Mappings returns the pod's requested port mappings; an invalid request is
// an error naming the pod, the annotation and the entry, wrapping
// ErrInvalidPod.
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

// Result says what happened to one sandbox.
type Result int

// Results.
const (
	ResultNone      Result = iota // nothing to do (no mappings, no namespace)
	ResultUnchanged               // the right endpoint already existed
	ResultCreated                 // endpoint created (or replaced, or re-attached)
	ResultDeleted                 // endpoint(s) removed
)

// Ensure gives a started sandbox the endpoint its annotation asks for. A pod
// without mappings, or whose sandbox has no Windows network namespace, is
// skipped. A bad annotation fails before anything is created.
func (c *Core) Ensure(ctx context.Context, p Pod) (Result, error) {
	mappings, err := c.Mappings(p)
	if err != nil {
		return ResultNone, err
	}
	if len(mappings) == 0 {
		return ResultNone, nil
	}
	unlock := c.locks.lock(p.ID)
	defer unlock()
	return c.ensureLocked(ctx, p, mappings)
}

func (c *Core) ensureLocked(ctx context.Context, p Pod, mappings []hcn.PortMapping) (Result, error) {
	log := c.podLog(p)
	sb, err := c.store.Sandbox(ctx, p.ID)
	if err != nil {
		return ResultNone, fmt.Errorf("pod %s: %w", p, err)
	}
	if sb.NetNS == "" {
		log.Info("sandbox has no Windows network namespace (Linux or HostProcess sandbox); skipped")
		return ResultNone, nil
	}
	policies := hcn.BuildPolicies(mappings, c.policy)
	ep, outcome, err := c.mgr.Ensure(ctx, hcn.Desired{SandboxID: p.ID, Namespace: sb.NetNS, Policies: policies})
	if err != nil {
		return ResultNone, fmt.Errorf("pod %s: %w", p, err)
	}
	log = log.WithFields(logrus.Fields{"endpoint": ep.ID, "netns": sb.NetNS})
	if outcome == hcn.Unchanged {
		log.Debug("endpoint already in place")
		return ResultUnchanged, nil
	}
	log.WithFields(logrus.Fields{"mappings": fmt.Sprint(mappings), "outcome": outcome.String()}).Info("endpoint attached")
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

// Live reports whether a sandbox is running, judged from containerd (the
// container exists; its task, when there is one, is not stopped) and HCN (its
// namespace still exists). A sandbox without a Windows namespace is not
// live for us.
func (c *Core) Live(ctx context.Context, id string) (bool, *SandboxInfo, error) {
	sb, err := c.store.Sandbox(ctx, id)
	if errors.Is(err, ErrSandboxNotFound) {
		return false, nil, nil
	}
	if err != nil {
		return false, nil, err
	}
	if sb.NetNS == "" {
		return false, sb, nil
	}
	state, err := c.store.TaskState(ctx, id)
	if err != nil {
		return false, sb, err
	}
	if state == TaskStopped {
		return false, sb, nil
	}
	ok, err := c.mgr.NamespaceExists(ctx, sb.NetNS)
	return ok, sb, err
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

// Reconcile converges HCN on the given pods (every pod the runtime knows,
// running or not): live pods with mappings get their endpoint, stopped or
// vanished pods lose theirs, and endpoints of ours whose sandbox is gone are
// deleted. An endpoint of a live sandbox that is not in pods is left alone,
// since its mappings are not known here. Work runs on up to workers
// goroutines.
func (c *Core) Reconcile(ctx context.Context, pods []Pod, workers int) (Summary, error) {
	owned, err := c.mgr.Owned(ctx)
	if err != nil {
		return Summary{}, err
	}
	known := make(map[string]bool, len(pods))
	type job struct {
		pod    Pod
		listed bool
	}
	var jobs []job
	for _, p := range pods {
		known[p.ID] = true
		jobs = append(jobs, job{p, true})
	}
	for _, ep := range owned {
		id, _ := c.mgr.SandboxID(ep.Name)
		if !known[id] {
			known[id] = true
			jobs = append(jobs, job{Pod{ID: id}, false})
		}
	}
	if workers < 1 {
		workers = 1
	}
	var (
		mu  sync.Mutex
		sum Summary
		wg  sync.WaitGroup
		ch  = make(chan job)
	)
	for range workers {
		wg.Go(func() {
			for j := range ch {
				r, err := c.reconcileOne(ctx, j.pod, j.listed)
				mu.Lock()
				sum.add(r, err)
				mu.Unlock()
			}
		})
	}
	for _, j := range jobs {
		ch <- j
	}
	close(ch)
	wg.Wait()
	return sum, nil
}

func (c *Core) reconcileOne(ctx context.Context, p Pod, listed bool) (Result, error) {
	mappings, perr := c.Mappings(p)
	unlock := c.locks.lock(p.ID)
	defer unlock()
	live, _, err := c.Live(ctx, p.ID)
	if err != nil {
		return ResultNone, fmt.Errorf("pod %s: deciding whether the sandbox is live: %w", p, err)
	}
	switch {
	case !live:
		return c.removeLocked(ctx, p)
	case !listed:
		return ResultNone, nil // live, but its request is unknown here
	case perr != nil:
		return ResultNone, perr
	case len(mappings) == 0:
		return c.removeLocked(ctx, p)
	}
	return c.ensureLocked(ctx, p, mappings)
}
