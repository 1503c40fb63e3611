package config

import "testing"

// On Windows the default configuration file is the chart's ConfigMap file
// in a HostProcess container (under %CONTAINER_SANDBOX_MOUNT_POINT%, with
// and without the bind filter: test/deploy/hostprocess_test.go), the
// service's under %ProgramData% elsewhere.
func TestDefaultPathOnWindows(t *testing.T) {
	for _, tc := range []struct{ mountPoint, programData, want string }{
		{`C:\hpc`, `C:\ProgramData`, `C:\hpc\etc\nri-hcn-portmap\config.toml`},
		{`C:\hpc\c0ffee`, `C:\ProgramData`, `C:\hpc\c0ffee\etc\nri-hcn-portmap\config.toml`},
		{"", `D:\Data`, `D:\Data\nri-hcn-portmap\config.toml`},
		{"", "", `C:\ProgramData\nri-hcn-portmap\config.toml`},
	} {
		t.Setenv("CONTAINER_SANDBOX_MOUNT_POINT", tc.mountPoint)
		t.Setenv("ProgramData", tc.programData)
		if got := DefaultPath(); got != tc.want {
			t.Errorf("mount point %q, ProgramData %q: %q, want %q", tc.mountPoint, tc.programData, got, tc.want)
		}
	}
}
