package hcn

import (
	"context"
	"errors"
	"strings"
	"sync"
)

// DefaultEndpointPrefix starts the name of every endpoint the plugin owns;
// the rest of the name is the sandbox ID, so removal works from the ID alone.
const DefaultEndpointPrefix = "nri-hcn-portmap-"

// ManagerConfig says where and how endpoints are built.
type ManagerConfig struct {
	Network       NetworkSpec
	CreateNetwork bool   // create Network when no network of that name exists
	Prefix        string // endpoint name prefix; DefaultEndpointPrefix when empty
	OutboundNAT   bool   // add an OutBoundNAT policy to every endpoint
}

// Manager builds, repairs and removes the plugin's endpoints through a
// Service. Every operation is idempotent and rolls back what it created when
// a later step fails. It is safe for concurrent use; callers serialize work
// per sandbox.
type Manager struct {
	svc Service
	cfg ManagerConfig

	mu        sync.Mutex
	networkID string // cached ID of cfg.Network
}

// NewManager returns a Manager over svc.
func NewManager(svc Service, cfg ManagerConfig) *Manager {
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultEndpointPrefix
	}
	return &Manager{svc: svc, cfg: cfg}
}

// Service returns the underlying Service.
func (m *Manager) Service() Service { return m.svc }

// EndpointName is the deterministic endpoint name of a sandbox.
func (m *Manager) EndpointName(sandboxID string) string { return m.cfg.Prefix + sandboxID }

// SandboxID returns the sandbox ID encoded in one of our endpoint names.
func (m *Manager) SandboxID(endpointName string) (string, bool) {
	id, ok := strings.CutPrefix(endpointName, m.cfg.Prefix)
	return id, ok && id != ""
}

// Desired is the endpoint a sandbox should have.
type Desired struct {
	SandboxID string
	Namespace string // HCN namespace GUID of the sandbox
	Policies  []PortMappingPolicy
}

// Outcome says what Ensure did.
type Outcome int

// Outcomes of Ensure.
const (
	Unchanged Outcome = iota // the right endpoint was already there
	Created                  // a new endpoint was created (maybe replacing others)
	Repaired                 // an existing endpoint was re-attached
)

func (o Outcome) String() string {
	return [...]string{"unchanged", "created", "repaired"}[o]
}

// EnsureNetwork returns the ID of the configured network, creating the
// network when configured to.
func (m *Manager) EnsureNetwork(ctx context.Context) (string, error) {
	m.mu.Lock()
	id := m.networkID
	m.mu.Unlock()
	if id != "" {
		return id, nil
	}
	n, err := m.svc.GetNetworkByName(ctx, m.cfg.Network.Name)
	if errors.Is(err, ErrNotFound) && m.cfg.CreateNetwork {
		n, err = m.svc.CreateNetwork(ctx, m.cfg.Network)
	}
	if err != nil {
		return "", stepErr(StepEnsureNetwork, m.cfg.Network.Name, err)
	}
	m.mu.Lock()
	m.networkID = n.ID
	m.mu.Unlock()
	return n.ID, nil
}

func (m *Manager) forgetNetwork() {
	m.mu.Lock()
	m.networkID = ""
	m.mu.Unlock()
}

// Ensure makes the sandbox's endpoint exist on the configured network with
// exactly d.Policies, attached to d.Namespace. An endpoint that already
// matches is left alone; one that differs is replaced; duplicates are
// deleted. When a step fails, what this call created is deleted again and
// the returned *StepError names the step.
func (m *Manager) Ensure(ctx context.Context, d Desired) (*Endpoint, Outcome, error) {
	name := m.EndpointName(d.SandboxID)
	existing, err := m.svc.ListEndpointsByName(ctx, name)
	if err != nil {
		return nil, Unchanged, stepErr(StepLookupEndpoint, name, err)
	}
	netID, err := m.EnsureNetwork(ctx)
	if err != nil {
		return nil, Unchanged, err
	}
	// Keep one matching endpoint, preferring one already attached where it
	// belongs (a late-created duplicate must not replace a working one).
	var keep *Endpoint
	matches := func(ep *Endpoint) bool {
		return ep.NetworkID == netID && ep.OutboundNAT == m.cfg.OutboundNAT && SamePolicies(ep.PortMappings, d.Policies)
	}
	for i := range existing {
		if ep := &existing[i]; matches(ep) && ep.Namespace == d.Namespace {
			keep = ep
			break
		}
	}
	if keep == nil {
		for i := range existing {
			if ep := &existing[i]; matches(ep) && ep.Namespace == "" {
				keep = ep
				break
			}
		}
	}
	for i := range existing {
		if ep := &existing[i]; ep != keep {
			if err := m.removeEndpoint(ctx, *ep); err != nil {
				return nil, Unchanged, err
			}
		}
	}
	if keep != nil && keep.Namespace == d.Namespace {
		return keep, Unchanged, nil
	}
	outcome := Repaired
	ep := keep
	if ep == nil {
		outcome = Created
		spec := EndpointSpec{Name: name, NetworkID: netID, PortMappings: d.Policies, OutboundNAT: m.cfg.OutboundNAT}
		ep, err = m.svc.CreateEndpoint(ctx, spec)
		if errors.Is(err, ErrNotFound) {
			// The network went away under us (HNS restart, operator):
			// look it up (or create it) again, once.
			m.forgetNetwork()
			if spec.NetworkID, err = m.EnsureNetwork(ctx); err != nil {
				return nil, Unchanged, err
			}
			ep, err = m.svc.CreateEndpoint(ctx, spec)
		}
		if err != nil {
			// The call may have taken effect although it failed (a lost
			// answer, a timeout): then the endpoint is ours by name, and
			// it also explains a port conflict with ourselves.
			if late := m.findLate(ctx, name, matches); late != nil {
				ep = late
			} else {
				return nil, Unchanged, stepErr(StepCreateEndpoint, name, err)
			}
		}
	}
	if err := m.svc.AddNamespaceEndpoint(ctx, d.Namespace, ep.ID); err != nil {
		attachErr := stepErr(StepAttachEndpoint, name+" to namespace "+d.Namespace, err)
		// Roll back: an unattached endpoint of ours would hold host ports
		// for nothing.
		if derr := m.svc.DeleteEndpoint(ctx, ep.ID); derr != nil && !errors.Is(derr, ErrNotFound) {
			return nil, Unchanged, errors.Join(attachErr, stepErr(StepDeleteEndpoint, ep.ID+" (rollback)", derr))
		}
		return nil, Unchanged, attachErr
	}
	ep.Namespace = d.Namespace
	return ep, outcome, nil
}

// findLate looks for an unattached endpoint of ours that a failed create
// left behind.
func (m *Manager) findLate(ctx context.Context, name string, matches func(*Endpoint) bool) *Endpoint {
	eps, err := m.svc.ListEndpointsByName(ctx, name)
	if err != nil {
		return nil
	}
	for i := range eps {
		if matches(&eps[i]) && eps[i].Namespace == "" {
			return &eps[i]
		}
	}
	return nil
}

// Remove detaches and deletes every endpoint of the sandbox. Something that
// is already gone counts as done. It returns how many endpoints it deleted.
func (m *Manager) Remove(ctx context.Context, sandboxID string) (int, error) {
	name := m.EndpointName(sandboxID)
	eps, err := m.svc.ListEndpointsByName(ctx, name)
	if err != nil {
		return 0, stepErr(StepLookupEndpoint, name, err)
	}
	n := 0
	for _, ep := range eps {
		if err := m.removeEndpoint(ctx, ep); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// RemoveEndpoint detaches and deletes one endpoint.
func (m *Manager) RemoveEndpoint(ctx context.Context, ep Endpoint) error {
	return m.removeEndpoint(ctx, ep)
}

func (m *Manager) removeEndpoint(ctx context.Context, ep Endpoint) error {
	if ep.Namespace != "" {
		err := m.svc.RemoveNamespaceEndpoint(ctx, ep.Namespace, ep.ID)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return stepErr(StepDetachEndpoint, ep.Name+" ("+ep.ID+") from namespace "+ep.Namespace, err)
		}
	}
	if err := m.svc.DeleteEndpoint(ctx, ep.ID); err != nil && !errors.Is(err, ErrNotFound) {
		return stepErr(StepDeleteEndpoint, ep.Name+" ("+ep.ID+")", err)
	}
	return nil
}

// Owned lists every endpoint whose name carries our prefix.
func (m *Manager) Owned(ctx context.Context) ([]Endpoint, error) {
	all, err := m.svc.ListEndpoints(ctx)
	if err != nil {
		return nil, stepErr(StepListEndpoints, "", err)
	}
	out := all[:0]
	for _, ep := range all {
		if _, ok := m.SandboxID(ep.Name); ok {
			out = append(out, ep)
		}
	}
	return out, nil
}

// NamespaceExists reports whether the HCN namespace exists.
func (m *Manager) NamespaceExists(ctx context.Context, id string) (bool, error) {
	_, err := m.svc.GetNamespace(ctx, id)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrNotFound):
		return false, nil
	}
	return false, stepErr(StepLookupNS, id, err)
}
