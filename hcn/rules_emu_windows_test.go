//go:build windows && hnsemu

package hcn_test

import (
	"encoding/json"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
)

// Against the emulator an unverified HNS rule is the emulator's: what it
// did must be what its rule variant says.
func observe(t *testing.T, rule, what string, asItsRuleSays bool) {
	t.Helper()
	if !asItsRuleSays {
		t.Errorf("%s: %s, which is not what the emulator's rules say", rule, what)
	}
}

// hnsRules are the variants to look at: the defaults, and every
// unverified rule the other way.
func hnsRules(*testing.T) []hcnsim.Rules {
	return []hcnsim.Rules{{}, {DeleteAttached: true, DropRoutes: true, NoDNSFill: true, EnumsAsNames: true, NATNeedsSubnet: true}}
}

// useRules makes r the emulator's rules until the test ends.
func useRules(t *testing.T, r hcnsim.Rules) {
	t.Helper()
	raw, _ := json.Marshal(r)
	emu(t, "Emu.SetRules", string(raw))
	t.Cleanup(func() { emu(t, "Emu.SetRules", "{}") })
}
