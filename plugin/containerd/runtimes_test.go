package containerd

import (
	"slices"
	"testing"
)

func TestRuntimeHandlersSayWhichAreHyperVAndWhichReachNCProxy(t *testing.T) {
	tests := []struct {
		name string
		toml string
		want []RuntimeHandler
	}{
		{"containerd 1.7 (version 2), the Windows defaults plus a Hyper-V handler with ncproxy", `version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runhcs-wcow-process]
  runtime_type = "io.containerd.runhcs.v1"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runhcs-wcow-hypervisor]
  runtime_type = "io.containerd.runhcs.v1"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runhcs-wcow-hypervisor.options]
    SandboxIsolation = 1
    NCProxyAddr = '\\.\pipe\ncproxy-ttrpc'
`, []RuntimeHandler{{Name: "runhcs-wcow-hypervisor", HyperV: true, NCProxy: `\\.\pipe\ncproxy-ttrpc`}, {Name: "runhcs-wcow-process"}}},
		{"containerd 2.x (version 3), options in other case, no ncproxy", `version = 3
[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.wcow-vm]
  runtime_type = 'io.containerd.runhcs.v1'
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.wcow-vm.options]
    sandboxisolation = 1
`, []RuntimeHandler{{Name: "wcow-vm", HyperV: true}}},
		{"process isolation said", `[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.p.options]
SandboxIsolation = 0
`, []RuntimeHandler{{Name: "p"}}},
		{"no CRI runtimes", `version = 2`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RuntimeHandlers([]byte(tt.toml))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("RuntimeHandlers = %+v, want %+v", got, tt.want)
			}
		})
	}
	if _, err := RuntimeHandlers([]byte("version = ")); err == nil {
		t.Error("a configuration that does not parse was read")
	}
}
