package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const monitoring = "../../deploy/monitoring"

// promtoolBin is Prometheus' promtool (make promtool installs it).
func promtoolBin(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("PROMTOOL_BIN"); p != "" {
		return p
	}
	if p, err := exec.LookPath("promtool"); err == nil {
		return p
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		if p := filepath.Join(strings.TrimSpace(string(out)), "bin", "promtool"); fileExists(p) {
			return p
		}
	}
	t.Fatal("no promtool: run `make promtool` (go install github.com/prometheus/prometheus/cmd/promtool)")
	return ""
}

// Issue 32: the shipped alert rules are valid Prometheus rules and do what
// their unit tests say (each alert fires on the series it is for, and not
// on the ones beside it); cmd/nri-hcn-portmap/monitoring_test.go checks
// they name only exported metrics.
func TestAlertRules(t *testing.T) {
	promtool := promtoolBin(t)
	for _, args := range [][]string{{"check", "rules", "alerts.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = monitoring
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
