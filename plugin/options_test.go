package plugin

import (
	"errors"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

// No pod maps the plugin's own ports, whatever they are set to (issue
// 46): a mapping of the admin or metrics port shadows the plugin's probes
// and metrics on the node's addresses. The rule holds beside the
// configuration's deny list, and for a reload's rules too (the ports are
// the running configuration's until a restart).
func TestNoPodMapsThePluginsOwnPorts(t *testing.T) {
	chart := config.Default() // the chart's: metrics on the node's addresses
	chart.Admin.MetricsListen = ":9467"
	moved := config.Default()
	moved.Admin.Listen, moved.Admin.MetricsListen = "127.0.0.1:19466", ":19467"
	open := testAdmission() // a reload's rules, without a deny list
	open.Deny = nil
	pod := admission.Pod{Namespace: "default"}
	for _, tc := range []struct {
		name    string
		running config.Config
		rules   config.Admission
		m       request.PortMapping
		denied  string // "": admitted
	}{
		{"the default admin port", config.Default(), config.Default().Admission, tcp(9466), `admin.listen = "127.0.0.1:9466"`},
		{"the chart's metrics port", chart, chart.Admission, tcp(9467), `admin.metrics_listen = ":9467"`},
		{"no metrics port of its own", config.Default(), config.Default().Admission, tcp(9467), ""},
		{"a moved admin port", moved, moved.Admission, tcp(19466), `admin.listen = "127.0.0.1:19466"`},
		{"a moved metrics port", moved, moved.Admission, tcp(19467), `admin.metrics_listen = ":19467"`},
		{"the default port once moved", moved, moved.Admission, tcp(9466), ""},
		{"a reload's rules without a deny list", moved, open, tcp(19466), "the plugin's own port"},
		{"UDP on the same number", moved, moved.Admission, request.PortMapping{Protocol: hcn.UDP, HostPort: 19466, ContainerPort: 80}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NodePolicy(tc.rules, tc.running)
			if err != nil {
				t.Fatal(err)
			}
			err = p.Admit(pod, []request.PortMapping{tc.m})
			if tc.denied == "" {
				if err != nil {
					t.Fatalf("%s refused: %v", tc.m, err)
				}
				return
			}
			if !errors.Is(err, admission.ErrDenied) || !strings.Contains(err.Error(), tc.denied) {
				t.Fatalf("%s: %v, want denied naming %q", tc.m, err, tc.denied)
			}
		})
	}
}

func tcp(port uint16) request.PortMapping {
	return request.PortMapping{Protocol: hcn.TCP, HostPort: port, ContainerPort: 80}
}
