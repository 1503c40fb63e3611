package main

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"sigs.k8s.io/yaml"
)

// Issue 32: the metrics pass promlint (what promtool check metrics runs),
// and the shipped alert rules and dashboard name only metrics the plugin
// exports: a renamed or dropped family fails here, not on an operator's
// empty panel.
func TestMonitoringNamesOnlyExportedMetrics(t *testing.T) {
	problems, err := promlint.New(strings.NewReader(exposition(t))).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "nri_hcn_portmap_") {
			t.Errorf("promlint: %s: %s", p.Metric, p.Text)
		}
	}
	families := metricNames(t)
	exported := func(name string) bool {
		for _, suffix := range []string{"", "_bucket", "_count", "_sum"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && families[base] {
				return true
			}
		}
		return false
	}
	var queries []string
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr string
			}
		}
	}
	b, err := os.ReadFile("../../deploy/monitoring/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil { // their schema is promtool's to check (test/deploy)
		t.Fatal(err)
	}
	// the rules that see a plugin's absence (or its coming and going)
	// read what Prometheus and kube-state-metrics export, not the plugin
	outside := map[string]string{"NriHcnPortmapDown": "up{", "NriHcnPortmapAbsent": "absent(up{", "NriHcnPortmapMissingOnAWindowsNode": "kube_node_labels{",
		"NriHcnPortmapFlapping": "avg_over_time(up{"}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if m, ok := outside[r.Alert]; ok {
				if !strings.Contains(r.Expr, m) {
					t.Errorf("%s: %q does not read %s", r.Alert, r.Expr, m)
				}
				continue
			}
			queries = append(queries, r.Expr)
		}
	}
	b, err = os.ReadFile("../../deploy/monitoring/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Type  string
				Query any
			}
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 && p.Title != "" {
			t.Errorf("dashboard panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if p.Title == "Nodes down or missing" { // issue 55: Prometheus' up, as the absence rules read it
				if !strings.Contains(tg.Expr, `up{app_kubernetes_io_name="nri-hcn-portmap"}`) {
					t.Errorf("dashboard panel %q: %q does not read the plugin's up", p.Title, tg.Expr)
				}
				continue
			}
			queries = append(queries, tg.Expr)
		}
	}
	for _, v := range dash.Templating.List {
		if q, ok := v.Query.(string); ok && v.Type == "query" {
			queries = append(queries, q)
		}
	}
	if len(rules.Groups) == 0 || len(dash.Panels) < 6 {
		t.Fatalf("%d rule groups, %d panels: the files were not read", len(rules.Groups), len(dash.Panels))
	}
	named := regexp.MustCompile(`nri_hcn_portmap_[a-z_]+`)
	for _, q := range queries {
		names := named.FindAllString(q, -1)
		if len(names) == 0 {
			t.Errorf("query %q names no metric of the plugin", q)
		}
		for _, n := range names {
			if !exported(n) {
				t.Errorf("query %q: the plugin exports no %s", q, n)
			}
		}
	}
}

// Issue 39: every alert says how severe it is and whose it is (category
// platform: the node's or HNS's, the operator's to fix; tenant: a pod's
// request, its owner's), and links a runbook: a section of
// docs/operating.md, there under "## Alerts" with the alert's name.
func TestEveryAlertHasItsCategoryAndARunbookThatIsThere(t *testing.T) {
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string
				Labels      map[string]string
				Annotations map[string]string
			}
		}
	}
	b, err := os.ReadFile("../../deploy/monitoring/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../../docs/operating.md")
	if err != nil {
		t.Fatal(err)
	}
	_, alertsSection, ok := strings.Cut(string(doc), "\n## Alerts\n")
	if !ok {
		t.Fatal(`docs/operating.md has no "## Alerts"`)
	}
	alertsSection, _, _ = strings.Cut(alertsSection, "\n## ")
	const base = "https://github.com/nri-hcn-portmap/nri-hcn-portmap/blob/main/docs/operating.md#"
	n := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			n++
			if sev := r.Labels["severity"]; sev != "critical" && sev != "warning" && sev != "info" {
				t.Errorf("%s: severity %q", r.Alert, sev)
			}
			if c := r.Labels["category"]; c != "platform" && c != "tenant" {
				t.Errorf("%s: category %q, want platform or tenant", r.Alert, c)
			}
			if r.Labels["category"] == "tenant" && r.Labels["severity"] != "info" {
				t.Errorf("%s: a tenant's alert is %s, want info (the pod's owner is told already)", r.Alert, r.Labels["severity"])
			}
			if url := r.Annotations["runbook_url"]; url != base+strings.ToLower(r.Alert) {
				t.Errorf("%s: runbook_url %q, want %s%s", r.Alert, url, base, strings.ToLower(r.Alert))
			}
			if !strings.Contains(alertsSection, "\n### "+r.Alert+"\n") {
				t.Errorf(`%s: docs/operating.md's "## Alerts" has no "### %s"`, r.Alert, r.Alert)
			}
		}
	}
	if n < 8 {
		t.Fatalf("%d rules read", n)
	}
}

// Issue 55: every reason the plugin counts a failing pod by raises
// exactly one of the two pod alerts: the node's (PodsFailing) or the
// pod's owner's (PodsRefused). A reason dropped from both (or added to
// the plugin and to neither) fails here.
func TestEveryFailureReasonRaisesOnePodAlert(t *testing.T) {
	var rules struct {
		Groups []struct {
			Rules []struct{ Alert, Expr string }
		}
	}
	b, err := os.ReadFile("../../deploy/monitoring/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	selects := map[string][]string{}
	reasonRe := regexp.MustCompile(`nri_hcn_portmap_pods_failing\{reason=~"([^"]+)"\}`)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if m := reasonRe.FindStringSubmatch(r.Expr); m != nil {
				for _, reason := range strings.Split(m[1], "|") {
					selects[reason] = append(selects[reason], r.Alert)
				}
			}
		}
	}
	for _, reason := range plugin.FailureReasons() {
		if got := selects[reason]; len(got) != 1 {
			t.Errorf("pods failing with %s raise %v, want exactly one alert", reason, got)
		}
		delete(selects, reason)
	}
	for reason, alerts := range selects {
		t.Errorf("%v select reason %s, which the plugin never reports", alerts, reason)
	}
}
