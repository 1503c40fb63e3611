package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
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

// alertSelectors are the labels (name to value) the alert rules select
// the plugin's up series by, but node, which they join on.
func alertSelectors(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(monitoring, "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range upSelector.FindAllStringSubmatch(string(b), -1) {
		for _, kv := range strings.Split(m[1], ",") {
			k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
			out[k] = strings.Trim(v, `"`)
		}
	}
	if len(out) == 0 {
		t.Fatal("alerts.yaml selects no up series")
	}
	return out
}

var upSelector = regexp.MustCompile(`\bup\{([^}]*)\}`)

// Issue 48: the scrape jobs docs/operating.md ("Scraping") gives are
// valid Prometheus configuration, and each gives its targets the labels
// the alerts select the plugin by (alertSelectors) and the node.
func TestTheDocumentedScrapeJobsGiveTheLabelsTheAlertsSelect(t *testing.T) {
	b, err := os.ReadFile("../../docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n## Scraping\n")
	if start < 0 {
		t.Fatal(`docs/operating.md has no "## Scraping"`)
	}
	section := doc[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	var jobs []string
	for _, block := range strings.Split(section, "```yaml\n")[1:] {
		body, _, _ := strings.Cut(block, "```")
		// the block as indented in the list, moved under scrape_configs
		var lines []string
		for _, l := range strings.Split(body, "\n") {
			lines = append(lines, "  "+strings.TrimPrefix(l, "  "))
		}
		jobs = append(jobs, strings.Join(lines, "\n"))
	}
	if len(jobs) != 2 {
		t.Fatalf("%d yaml blocks under Scraping, want the annotation-based job and the service's", len(jobs))
	}
	// Debian's promtool (the one .ci/run installs) is built without
	// Kubernetes discovery: the pod role is checked as a static target,
	// the relabelings as written
	sd := regexp.MustCompile(`kubernetes_sd_configs:\n(\s+)- role: pod`)
	if !sd.MatchString(jobs[0]) {
		t.Fatalf("the annotation-based job does not discover pods:\n%s", jobs[0])
	}
	checked := sd.ReplaceAllString(strings.Join(jobs, "\n"), "static_configs:\n$1- targets: [\"10.1.2.1:9467\"]")
	file := filepath.Join(t.TempDir(), "prometheus.yml")
	if err := os.WriteFile(file, []byte("scrape_configs:\n"+checked), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtoolBin(t), "check", "config", file).CombinedOutput(); err != nil {
		t.Fatalf("promtool check config on the documented jobs: %v\n%s\n%s", err, out, strings.Join(jobs, "\n"))
	}
	pods, service := jobs[0], jobs[1]
	if !strings.Contains(pods, "regex: __meta_kubernetes_pod_label_(.+)") || !strings.Contains(pods, "action: labelmap") ||
		!regexp.MustCompile(`source_labels: \[__meta_kubernetes_pod_node_name\]\s+target_label: node`).MatchString(pods) {
		t.Errorf("the annotation-based job maps no pod labels or no node:\n%s", pods)
	}
	for name, value := range alertSelectors(t) {
		if !strings.Contains(service, name+": "+value) {
			t.Errorf("the service's job does not label its targets %s: %s:\n%s", name, value, service)
		}
	}
	if !strings.Contains(service, "node: ") {
		t.Errorf("the service's job does not label its targets with the node:\n%s", service)
	}
}

// Every reason the plugin tells a failing pod's owners is one of the two
// alerts' (the node's, or the tenant's), and no reason both; a reason
// added to the plugin's table and not to an alert fails here.
func TestEveryFailureReasonHasItsAlert(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(monitoring, "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	alerted := map[string]int{}
	for _, m := range reasonSelector.FindAllStringSubmatch(string(b), -1) {
		for _, r := range strings.Split(m[1], "|") {
			alerted[r]++
		}
	}
	for _, r := range plugin.FailureReasons() {
		if alerted[r] != 1 {
			t.Errorf("reason %s is selected by %d alerts, want 1", r, alerted[r])
		}
	}
}

var reasonSelector = regexp.MustCompile(`nri_hcn_portmap_pods_failing\{reason=~"([^"]*)"\}`)
