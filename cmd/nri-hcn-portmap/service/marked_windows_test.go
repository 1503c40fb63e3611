package service

import (
	"errors"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/windows/svc/mgr"
)

// Issue 53: on the SCM itself (wine's under make test-windows, Windows' in
// the Windows workflow), a service deleted while another handle holds it
// is marked for deletion, and Marked says so by a signal the SCM gives,
// named: its start type read back as disabled (MS-SCMR 3.1.4.3), or 1072
// answered to a change. A service not deleted is not marked.
func TestADeletedServiceHeldOpenIsKnownAsMarked(t *testing.T) {
	const name = "nri-hcn-portmap-marked-test"
	m, plan := onTheSCM(t, name)
	created, err := scm{m}.Create(plan)
	if err != nil {
		t.Fatalf("creating the service: %v", err)
	}
	defer created.Close()
	if seen, err := created.Marked(); err != nil || seen != "" {
		t.Fatalf("a service just installed: marked %q, %v; want not marked", seen, err)
	}
	held, err := scm{m}.Open(name) // another program's handle (services.msc, sc.exe qc)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := created.Delete(); err != nil {
		t.Fatalf("deleting it: %v", err)
	}
	seen, err := held.Marked()
	if err != nil || seen == "" || !(strings.Contains(seen, "start type is disabled") || strings.Contains(seen, "1072")) {
		t.Fatalf("a deleted service held open: marked %q, %v; want a signal named", seen, err)
	}
	t.Logf("the SCM's signals: %s", seen)
	if err := held.Delete(); !errors.Is(err, ErrMarkedForDelete) {
		t.Errorf("deleting it again: %v, want ErrMarkedForDelete", err)
	}
}

// Issue 55: on the SCM itself, the DaemonSet's init step (service absent)
// passes a node without the service and refuses one where it is
// installed, naming its state.
func TestAbsentReadsTheSCM(t *testing.T) {
	const name = "nri-hcn-portmap-absent-test"
	m, plan := onTheSCM(t, name)
	if err := Absent(name); err != nil {
		t.Fatalf("no such service: %v, want nothing said", err)
	}
	created, err := scm{m}.Create(plan)
	if err != nil {
		t.Fatalf("creating the service: %v", err)
	}
	defer func() { _ = created.Delete(); created.Close() }()
	if err := Absent(name); !errors.Is(err, ErrServiceInstalled) || !strings.Contains(err.Error(), name+" (stopped)") {
		t.Fatalf("the service installed: %v, want ErrServiceInstalled naming it stopped", err)
	}
}

// onTheSCM connects to the SCM (disconnected when the test ends), removes
// a service name a run before this one left, and plans one of that name
// running this test binary.
func onTheSCM(t *testing.T, name string) (*mgr.Mgr, Plan) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m, err := mgr.Connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Disconnect() })
	if old, err := m.OpenService(name); err == nil {
		_ = old.Delete()
		old.Close()
	}
	plan, err := InstallPlan(exe, "", nil, func(string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	plan.Name = name
	return m, plan
}
