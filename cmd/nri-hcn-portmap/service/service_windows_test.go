//go:build windows && !hnsemu

// The service under the real service control manager: run on a Windows
// host (the windows-hns workflow). Not under wine (build tag hnsemu), whose
// SCM lacks the configuration levels and locking this needs.
package service

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/windows/svc"
	"golang.org/x/sys/windows/svc/mgr"
)

// When the SCM starts this test binary as a service, it runs Handle with a
// run function that records a reload, instead of the tests. The marker file
// comes as a service argument: a service does not see the environment of
// the process that installed it.
func TestMain(m *testing.M) {
	if is, _ := IsService(); is {
		var marker string
		for _, a := range os.Args[1:] {
			if v, ok := strings.CutPrefix(a, "--marker="); ok {
				marker = v
			}
		}
		err := Run(testServiceName, func(ctx context.Context) error {
			_ = os.WriteFile(marker, []byte("running"), 0o644)
			<-ctx.Done()
			time.Sleep(100 * time.Millisecond) // in-flight work finishing
			return os.WriteFile(marker, []byte("stopped cleanly"), 0o644)
		}, func() { _ = os.WriteFile(marker+".reload", []byte("reloaded"), 0o644) })
		if err != nil {
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

const testServiceName = "nri-hcn-portmap-test"

func waitState(t *testing.T, s *mgr.Service, want svc.State) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := s.Query()
		if err == nil && st.State == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("service state %v (%v), want %v", st.State, err, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestServiceUnderTheSCM(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(testDir(t), "config.toml")
	if err := os.WriteFile(cfg, []byte("[hcn]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	plan, err := InstallPlan(exe, cfg, nil, Exists)
	if err != nil {
		t.Fatal(err)
	}
	plan.Name = testServiceName
	marker := filepath.Join(testDir(t), "marker")
	plan.Args = []string{"--marker=" + marker}
	_ = Uninstall(testServiceName)
	if err := Install(plan); err != nil {
		t.Fatalf("Install: %v", err)
	}
	t.Cleanup(func() { _ = Uninstall(testServiceName) })
	if err := Install(plan); err == nil {
		t.Error("a second install must fail")
	}
	m, err := mgr.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Disconnect()
	s, err := m.OpenService(testServiceName)
	if err != nil {
		t.Fatal(err)
	}
	// closed before Uninstall: the SCM removes a deleted service only when
	// its last handle closes, this one included (MS-SCMR RDeleteService;
	// TestTheSCMTestsSequenceHoldsUnderTheHandleRule runs this sequence
	// against a fake that keeps the rule, everywhere)
	closed := false
	defer func() {
		if !closed {
			s.Close()
		}
	}()
	c, err := s.Config()
	if err != nil || c.StartType != mgr.StartAutomatic || c.DisplayName != plan.DisplayName {
		t.Errorf("config %+v, %v", c, err)
	}
	actions, err := s.RecoveryActions()
	if err != nil || len(actions) != 3 || actions[0].Type != mgr.ServiceRestart || actions[0].Delay != 5*time.Second {
		t.Errorf("recovery actions %+v, %v", actions, err)
	}
	// run it: the binary is this test, which acts as the service
	if err := s.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	waitState(t, s, svc.Running)
	if _, err := s.Control(svc.ParamChange); err != nil {
		t.Errorf("paramchange: %v", err)
	}
	if _, err := s.Control(svc.Stop); err != nil {
		t.Fatalf("stop: %v", err)
	}
	waitState(t, s, svc.Stopped)
	if st, err := s.Query(); err != nil || st.Win32ExitCode != 0 || st.ServiceSpecificExitCode != 0 {
		t.Errorf("after an operator's stop: %+v, %v; want exit code 0 (no recovery restart)", st, err)
	}
	got, _ := os.ReadFile(marker)
	if string(got) != "stopped cleanly" {
		t.Errorf("marker %q: the run function did not finish before Stopped", got)
	}
	if _, err := os.Stat(marker + ".reload"); err != nil {
		t.Errorf("paramchange did not reload: %v", err)
	}
	s.Close()
	closed = true
	if err := Uninstall(testServiceName); err != nil {
		t.Fatalf("Uninstall: %v", err)
	}
	if s, err := m.OpenService(testServiceName); err == nil {
		s.Close()
		t.Error("service still there after Uninstall")
	}
}
