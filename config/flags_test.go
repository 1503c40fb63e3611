package config

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/testfs"
)

// Without --config the default path is read when a file is there, and the
// defaults apply when none is; --config wins over it.
func TestDefaultPathIsReadWhenThere(t *testing.T) {
	dir := testfs.TempDir(t) // wine cannot remove t.TempDir's files
	there := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(there, []byte("[hcn]\nnetwork = \"from-the-default-path\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other.toml")
	if err := os.WriteFile(other, []byte("[hcn]\nnetwork = \"from-config\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, defaultPath string
		args              []string
		env               string // ConfigEnv's value ("": unset)
		network, path     string
	}{
		{"a file at the default path", there, nil, "", "from-the-default-path", there},
		{"none there", filepath.Join(dir, "absent.toml"), nil, "", "nat", ""},
		{"--config wins", there, []string{"--config", other}, "", "from-config", other},
		// issue 53: the DaemonSet's configuration, resolved by kubelet from
		// the ConfigMap: no file read, none checked
		{"the environment over the default path", there, nil, "[hcn]\nnetwork = \"from-the-environment\"\n", "from-the-environment", ""},
		{"--config over the environment", there, []string{"--config", other}, "[hcn]\nnetwork = \"from-the-environment\"\n", "from-config", other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv(ConfigEnv, tc.env)
			}
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			f := RegisterFlags(fs)
			f.defaultPath = tc.defaultPath
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			cfg, err := f.Resolve()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.HCN.Network != tc.network || f.ConfigPath() != tc.path {
				t.Errorf("network %q from %q, want %q from %q", cfg.HCN.Network, f.ConfigPath(), tc.network, tc.path)
			}
		})
	}
}

// A configuration in the environment is decoded as strictly as a file's,
// and an error names the variable, the line and the key.
func TestTheEnvironmentsConfigurationIsNamedInErrors(t *testing.T) {
	t.Setenv(ConfigEnv, "[hcn]\nnetwrok = \"x\"\n")
	f := RegisterFlags(flag.NewFlagSet("x", flag.ContinueOnError))
	_, err := f.Resolve()
	if err == nil || !strings.Contains(err.Error(), "environment variable "+ConfigEnv) || !strings.Contains(err.Error(), "netwrok") {
		t.Fatalf("Resolve: %v, want an error naming the variable and the key", err)
	}
}
