//go:build windows && !hnsemu

package hcn_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
)

// On a real HNS an unverified rule is what HNS does: reported (a line of
// the test's log, and of $HNS_RULES_REPORT when set: the Windows workflow
// publishes it), never failed. Which variant the simulator must default to
// is read off this report.
func observe(t *testing.T, rule, what string, asTheDefaultSays bool) {
	t.Helper()
	line := fmt.Sprintf("HNS RULE: %s: %s (the simulator's default variant: %s)", rule, what,
		map[bool]string{true: "agrees", false: "DIFFERS"}[asTheDefaultSays])
	t.Log(line)
	if path := os.Getenv("HNS_RULES_REPORT"); path != "" {
		if f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			fmt.Fprintln(f, line)
			f.Close()
		}
	}
}

// hnsRules: a real HNS is one variant; the report compares it with the
// simulator's defaults.
func hnsRules(*testing.T) []hcnsim.Rules { return []hcnsim.Rules{{}} }

// useRules: a real HNS's rules are its own.
func useRules(*testing.T, hcnsim.Rules) {}
