package deploy

import (
	"os/exec"
	"strings"
	"testing"
)

const monitoring = "../../deploy/monitoring"

// promtoolBin is Prometheus' promtool (make promtool installs it).
func promtoolBin(t *testing.T) string {
	return tool(t, "PROMTOOL_BIN", "promtool", "run `make promtool` (go install github.com/prometheus/prometheus/cmd/promtool)")
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
