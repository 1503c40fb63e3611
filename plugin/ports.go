package plugin

import (
	"errors"
	"fmt"

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

func keyOf(p hcn.PortMappingPolicy) portKey {
	return portKey{proto: p.Protocol, port: p.ExternalPort, v6: p.IsIPv6()}
}

// portIndex knows which sandbox holds which host port, so conflicts are
// found before HNS is called and reported with the other pod's name.
// Checks cost O(mappings of the pod), not O(pods on the node). It is part
// of the controller's state and guarded by its lock.
type portIndex map[portKey]map[string][]string // key -> sandbox ID -> VIPs ("" = every address)

func newPortIndex() portIndex { return portIndex{} }

// conflict returns a *ConflictError when a sandbox other than id holds one
// of policies' host ports; nameOf names a holder.
func (x portIndex) conflict(id string, policies []hcn.PortMappingPolicy, nameOf func(holder string) string) error {
	for _, p := range policies {
		for holder, vips := range x[keyOf(p)] {
			if holder == id {
				continue
			}
			for _, vip := range vips {
				if vip == "" || p.VIP == "" || vip == p.VIP {
					return &ConflictError{Policy: p, HolderID: holder, Holder: nameOf(holder)}
				}
			}
		}
	}
	return nil
}

// set replaces what id holds (old) with policies.
func (x portIndex) set(id string, old, policies []hcn.PortMappingPolicy) {
	for _, p := range old {
		k := keyOf(p)
		delete(x[k], id)
		if len(x[k]) == 0 {
			delete(x, k)
		}
	}
	for _, p := range policies {
		k := keyOf(p)
		if x[k] == nil {
			x[k] = map[string][]string{}
		}
		x[k][id] = append(x[k][id], p.VIP)
	}
}
