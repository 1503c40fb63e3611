package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/testfs"
)

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

// Issue 48: a value refused in a file written as UTF-16 (PowerShell 5.1's
// > and Out-File) names its line, as in the same file written as UTF-8.
func TestARefusedValueNamesItsLineInEveryEncoding(t *testing.T) {
	const text = "[plugin]\nsource = \"containerd\"\n\n[hcn]\nroute_metric = 0\n"
	for name, data := range map[string][]byte{
		"UTF-8":               []byte(text),
		"UTF-8 with a BOM":    append([]byte("\xef\xbb\xbf"), text...),
		"UTF-16LE with a BOM": utf16With([]byte{0xff, 0xfe}, text, false),
		"UTF-16BE with a BOM": utf16With([]byte{0xfe, 0xff}, text, true),
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(testfs.TempDir(t), "config.toml") // wine cannot remove t.TempDir's files
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadValidated(path)
			if want := path + ":5: hcn.route_metric = \"0\": must be 1 to 65535"; err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("LoadValidated: %v, want it to say %s", err, want)
			}
		})
	}
}
