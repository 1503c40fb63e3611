package plugin

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// ErrPortConflict: another pod already holds the host port.
var ErrPortConflict = errors.New("host port held by another pod")

// ConflictError names the mapping and the pod that holds its port.
type ConflictError struct {
	Policy   hcn.PortMappingPolicy
	HolderID string // sandbox ID of the holder
	Holder   string // namespace/name of the holder, when known
}

func (e *ConflictError) Error() string {
	who := "sandbox " + e.HolderID
	if e.Holder != "" {
		who = "pod " + e.Holder + " (sandbox " + e.HolderID + ")"
	}
	return fmt.Sprintf("host port %s is already held by %s", e.Policy.String(), who)
}

func (e *ConflictError) Unwrap() error { return ErrPortConflict }

// portKey groups policies that can collide: same protocol, host port and
// address family.
type portKey struct {
	proto hcn.Protocol
	port  uint16
	v6    bool
}

type heldPorts struct {
	name     string // namespace/name, "" when only HCN told us
	policies []hcn.PortMappingPolicy
}

// portIndex knows which pod holds which host port, so conflicts are found
// before HNS is called and reported with the other pod's name. Checks cost
// O(mappings of the pod), not O(pods on the node).
type portIndex struct {
	mu    sync.Mutex
	byPod map[string]heldPorts
	byKey map[portKey]map[string][]string // key -> sandbox ID -> VIPs ("" = every address)
}

func newPortIndex() *portIndex {
	return &portIndex{byPod: map[string]heldPorts{}, byKey: map[portKey]map[string][]string{}}
}

func keyOf(p hcn.PortMappingPolicy) portKey {
	return portKey{proto: p.Protocol, port: p.ExternalPort, v6: p.IsIPv6()}
}

// reserve records that the pod will hold policies, unless another pod holds
// one of them. It returns a function that restores what was recorded before.
func (x *portIndex) reserve(id, name string, policies []hcn.PortMappingPolicy) (undo func(), err error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, p := range policies {
		for holder, vips := range x.byKey[keyOf(p)] {
			if holder == id {
				continue
			}
			for _, vip := range vips {
				if vip == "" || p.VIP == "" || vip == p.VIP {
					return nil, &ConflictError{Policy: p, HolderID: holder, Holder: x.byPod[holder].name}
				}
			}
		}
	}
	prev, had := x.byPod[id]
	x.setLocked(id, heldPorts{name: name, policies: policies})
	return func() {
		x.mu.Lock()
		defer x.mu.Unlock()
		if had {
			x.setLocked(id, prev)
		} else {
			x.setLocked(id, heldPorts{})
		}
	}, nil
}

// release forgets the pod's ports.
func (x *portIndex) release(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.setLocked(id, heldPorts{})
}

// adopt records endpoints found in HCN for pods the index does not know
// (after a restart, or a late HNS answer).
func (x *portIndex) adopt(id string, policies []hcn.PortMappingPolicy) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if _, ok := x.byPod[id]; !ok {
		x.setLocked(id, heldPorts{policies: policies})
	}
}

func (x *portIndex) setLocked(id string, h heldPorts) {
	for _, p := range x.byPod[id].policies {
		k := keyOf(p)
		delete(x.byKey[k], id)
		if len(x.byKey[k]) == 0 {
			delete(x.byKey, k)
		}
	}
	if len(h.policies) == 0 {
		delete(x.byPod, id)
		return
	}
	x.byPod[id] = h
	for _, p := range h.policies {
		k := keyOf(p)
		if x.byKey[k] == nil {
			x.byKey[k] = map[string][]string{}
		}
		x.byKey[k][id] = append(x.byKey[k][id], p.VIP)
	}
}

// ids returns the sandboxes holding ports.
func (x *portIndex) ids() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Collect(maps.Keys(x.byPod))
}

func (x *portIndex) size() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.byPod)
}
