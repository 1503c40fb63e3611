package config

import (
	"errors"
	"strings"
	"testing"
)

func FuzzDecode(f *testing.F) {
	for _, seed := range []string{
		"[hcn]\nnetwork = \"nat\"\n",
		"[plugin]\nsource = \"containerd\"\nresync_interval = \"30s\"\nmapping_sources = [\"annotations\", \"cri\"]\n",
		"[admission]\nnamespaces = [\"*\"]\nhost_port_ranges = [\"1024-65535\"]\ndeny = [\"3389\"]\n",
		"[hcn]\nnetwrok = 1\n", "[hcn\n", "[log]\nlevel = 3\n", "x = \"\\u0000\"\n", "[[hcn]]\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data string) {
		cfg := Default()
		err := Decode("/etc/fuzz.toml", []byte(data), &cfg)
		if err != nil {
			if !strings.Contains(err.Error(), "/etc/fuzz.toml") {
				t.Fatalf("error %q does not name the file", err)
			}
			if !errors.Is(err, ErrUnknownKey) && !errors.Is(err, ErrSyntax) {
				var ce *Error
				if !errors.As(err, &ce) {
					t.Fatalf("error %v is not a config error", err)
				}
			}
			return
		}
		if err := cfg.Validate("/etc/fuzz.toml", nil); err != nil && !strings.Contains(err.Error(), "/etc/fuzz.toml") {
			t.Fatalf("validation error %q does not name the file", err)
		}
	})
}
