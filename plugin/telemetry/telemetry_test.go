package telemetry_test

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/telemetry"
)

func scrape(t *testing.T, m *telemetry.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

// Issue 39: on a healthy node pods_failing has a series for every reason
// a pod's owners may be told, at zero (a dashboard shows 0, not "no
// data"), and a failing reason its count.
func TestPodsFailingHasEveryReasonFromTheStart(t *testing.T) {
	m := telemetry.New("test", "abc")
	failing := map[string]int{}
	m.CountFailing(plugin.FailureReasons(), func() map[string]int { return failing })
	out := scrape(t, m)
	reasons := plugin.FailureReasons()
	for _, want := range []string{plugin.ReasonHNS, plugin.ReasonConflict, plugin.ReasonDenied, plugin.ReasonPodSecurity, plugin.ReasonInvalid, plugin.ReasonContainerd} {
		line := fmt.Sprintf(`nri_hcn_portmap_pods_failing{reason=%q} 0`, want)
		if !strings.Contains(out, line) {
			t.Errorf("no %s on a healthy node (reasons %v)", line, reasons)
		}
	}
	failing[plugin.ReasonConflict] = 2
	if line := `nri_hcn_portmap_pods_failing{reason="HostPortConflict"} 2`; !strings.Contains(scrape(t, m), line) {
		t.Errorf("no %s", line)
	}
}

// Issue 39: a not-found answer (a lookup of what is not there) is HNS
// answering, not an HNS error: counted as a call, not as a failure; a
// failing call is both.
func TestANotFoundAnswerIsNoHNSError(t *testing.T) {
	m := telemetry.New("test", "abc")
	sim := hcnsim.New()
	svc := hcn.Instrumented(sim, m.HCNCall)
	ctx := context.Background()
	if _, err := svc.GetEndpoint(ctx, "9E4A0C4F-0000-0000-0000-000000000000"); err == nil {
		t.Fatal("found an endpoint that is not there")
	}
	if err := sim.InjectFault(hcnsim.Fault{Op: hcnsim.OpGetEndpoint, Kind: "unavailable"}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.GetEndpoint(ctx, "9E4A0C4F-0000-0000-0000-000000000000"); err == nil {
		t.Fatal("the injected fault did not fail the call")
	}
	out := scrape(t, m)
	if !strings.Contains(out, `nri_hcn_portmap_hcn_call_duration_seconds_count{call="GetEndpoint"} 2`) ||
		!strings.Contains(out, `nri_hcn_portmap_hcn_call_errors_total{call="GetEndpoint"} 1`) {
		t.Errorf("want 2 calls and 1 error (the fault, not the not-found):\n%s", out)
	}
}
