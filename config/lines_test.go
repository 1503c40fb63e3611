package config

import "testing"

func TestKeyLines(t *testing.T) {
	got := keyLines([]byte(`# comment
[plugin]
source = "carrier-pigeon"

[nri]
plugin_index = "5"
[hcn]
network = "x"
[admission]
host_port_ranges = [
  "80-70",
]
`))
	want := map[string]int{"plugin.source": 3, "nri.plugin_index": 6, "hcn.network": 8, "admission.host_port_ranges": 10}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("line of %s = %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
}
