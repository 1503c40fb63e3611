package plugin

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// A Hyper-V isolated pod's utility VM takes its network adapters when its
// network is set up, and never looks at the namespace again. With ncproxy
// (hcsshim's network configuration proxy) in the runtime's options the shim
// asks ncproxy to set the pod's network up before the VM uses it, and
// ncproxy asks its NodeNetworkService (package nodenet, served by the
// plugin): the entry points below are that service's way into the
// controller. The pod is decided as any other (one sync, one decision);
// the sandbox is marked as set up through ncproxy, which lifts the Hyper-V
// refusal for it alone (decide's skip).

// NIC is an endpoint of a Hyper-V sandbox's namespace, given to its
// utility VM as a network adapter.
type NIC struct {
	EndpointID, EndpointName string
	Ours                     bool // the plugin's endpoint (host ports); else the CNI's
}

// HyperVNetwork is what a Hyper-V sandbox's VM is given: the endpoints
// of its namespace, the CNI's first (the pod's first adapter, its default
// route), then ours; and, when the pod was refused host ports, why (the
// pod runs without them, as a process-isolated pod would).
type HyperVNetwork struct {
	NICs    []NIC
	Refused error
}

// SetUpHyperV is ncproxy's ConfigureNetworking(Setup) for the sandbox id:
// its host ports decided and its endpoint built as a process-isolated
// pod's, within the deadline; the answer names the namespace's endpoints.
// An error means the pod's start should fail (containerd or HNS could not
// be read or did not answer, the sandbox is no pod's); a refusal does not.
func (c *Core) SetUpHyperV(ctx context.Context, id string) (HyperVNetwork, error) {
	dctx, cancel := context.WithTimeout(ctx, c.opt.Deadline)
	defer cancel()
	r, answered := c.awaitResult(dctx, id, sighting{pod: &Pod{ID: id, Partial: true}, start: true, hyperV: true}, false)
	err := r.err
	if !answered { // the shim fails the pod's start: leave nothing behind
		c.opt.Observer.Operation("start", Classify(ErrDeadline))
		c.enqueue(id, sighting{stop: true})
		return HyperVNetwork{}, fmt.Errorf("sandbox %s: %w (%s); what was started is rolled back", id, ErrDeadline, c.opt.Deadline)
	}
	c.opt.Observer.Operation("start", Classify(err))
	if err != nil && !kindOf(err).refusal() {
		return HyperVNetwork{}, err
	}
	if r.neighboursRead && err == nil { // the sync read what the VM is given
		return HyperVNetwork{NICs: nicsOf(r.neighbours, r.eps, "")}, nil
	}
	nics, nerr := c.HyperVNICs(ctx, id) // a refusal read none of them
	if nerr != nil {
		return HyperVNetwork{}, nerr
	}
	return HyperVNetwork{NICs: nics, Refused: err}, nil
}

// HyperVNICs is the endpoints of the sandbox id's namespace, the CNI's
// first, then ours: containerd's record names the namespace, HNS its
// endpoints. A sandbox containerd no longer has is left its endpoints
// of ours.
func (c *Core) HyperVNICs(ctx context.Context, id string) ([]NIC, error) {
	ours, err := c.mgr.Lookup(ctx, id)
	if err != nil {
		return nil, err
	}
	sb, err := c.store.Sandbox(ctx, id)
	switch {
	case errors.Is(err, ErrSandboxNotFound):
		return nicsOf(nil, ours, ""), nil
	case err != nil:
		return nil, fmt.Errorf("reading the sandbox from containerd: %w", err)
	case sb.NetNS == "":
		return nil, fmt.Errorf("sandbox %s has no Windows network namespace", id)
	}
	ids := make([]string, 0, len(ours))
	for _, ep := range ours {
		ids = append(ids, ep.ID)
	}
	cni, err := c.mgr.Neighbours(ctx, sb.NetNS, id, ids...)
	if err != nil {
		return nil, err
	}
	return nicsOf(cni, ours, sb.NetNS), nil
}

// nicsOf is the NICs of namespace ns: cni's, then ours attached to it
// ("": attached anywhere).
func nicsOf(cni, ours []hcn.Endpoint, ns hcn.GUID) []NIC {
	var out []NIC
	for _, ep := range cni {
		out = append(out, NIC{EndpointID: ep.ID, EndpointName: ep.Name})
	}
	for _, ep := range ours {
		if ns == "" || ep.Namespace == ns {
			out = append(out, NIC{EndpointID: ep.ID, EndpointName: ep.Name, Ours: true})
		}
	}
	return slices.Clip(out)
}

// TearDownHyperV is ncproxy's ConfigureNetworking(Teardown) for the
// sandbox id, once its VM's adapters are gone: the sandbox stopped, for
// good; its endpoint is removed and its ports given back, within the
// deadline (the rest in the background, as for any stop).
func (c *Core) TearDownHyperV(ctx context.Context, id string) {
	c.stopPod(ctx, Pod{ID: id, Partial: true}, false)
}
