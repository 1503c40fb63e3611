package e2e

import (
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/doctor"
)

// TestDoctor runs `nri-hcn-portmap doctor` as an operator would, against
// real containerd and the simulator: before the plugin runs, with the
// plugin serving a mapped pod (and --selftest, which must leave the pod's
// endpoint alone and nothing of its own), and with HNS unreachable (exit
// status 1, the failed check named).
func TestDoctor(t *testing.T) {
	env, ctx := newEnv(t, eventsConfig)
	report := func(t *testing.T, extra ...string) (doctor.Report, error) {
		t.Helper()
		out, stderr, err := env.Command(ctx, "doctor", append(extra, "-o", "json")...)
		var rep doctor.Report
		if jerr := json.Unmarshal([]byte(out), &rep); jerr != nil {
			t.Fatalf("doctor output: %v\n%s\n%s", jerr, out, stderr)
		}
		return rep, err
	}
	want := func(t *testing.T, rep doctor.Report, check string, st doctor.Status, detail string) {
		t.Helper()
		for _, r := range rep.Results {
			if r.Check == check {
				if r.Status != st || !strings.Contains(r.Detail, detail) {
					t.Errorf("%s = %s %q; want %s ~%q", check, r.Status, r.Detail, st, detail)
				}
				return
			}
		}
		t.Errorf("no check %q in %+v", check, rep.Results)
	}

	rep, err := report(t)
	if err != nil || !rep.Fit() {
		t.Fatalf("doctor before the plugin runs: %v %+v", err, rep.Results)
	}
	want(t, rep, "event subscription", doctor.Warn, "not running")
	want(t, rep, "admin address", doctor.Pass, "free")
	want(t, rep, "network nat", doctor.Warn, "the plugin creates it when it starts")
	want(t, rep, "containerd", doctor.Pass, env.CtrAddress)

	if err := env.StartPluginEvents(ctx); err != nil {
		t.Fatal(err)
	}
	p := pod("doctor-web", "18480:80")
	guid := runSandbox(t, ctx, env, p)
	wantEndpoint(t, ctx, env, p.ID, guid, []hcn.PortMappingPolicy{tcp(18480, 80, "", 1)})
	rep, err = report(t, "--selftest", "--port", "18481")
	if err != nil || !rep.Fit() {
		t.Fatalf("doctor --selftest with the plugin running: %v %+v", err, rep.Results)
	}
	want(t, rep, "event subscription", doctor.Pass, "live")
	want(t, rep, "admin address", doctor.Pass, "served by the running plugin")
	want(t, rep, "network nat", doctor.Pass, "gateway 172.30.0.1")
	want(t, rep, "selftest: read back", doctor.Pass, "metric 5000")
	want(t, rep, "selftest: cleanup", doctor.Pass, "removed")
	st, _, err := env.SimClient.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range st.Endpoints {
		if strings.HasPrefix(ep.Name, doctor.SelfTestPrefix) {
			t.Errorf("the self-test left %+v", ep)
		}
	}
	wantEndpoint(t, ctx, env, p.ID, guid, []hcn.PortMappingPolicy{tcp(18480, 80, "", 1)})

	rep, err = report(t, "--hcn-simulator", "unix:///nonexistent/hcnsim.sock")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || rep.Fit() {
		t.Fatalf("doctor with HNS unreachable: %v, fit %v", err, rep.Fit())
	}
	want(t, rep, "HNS", doctor.Fail, "hcnsim.sock")
}
