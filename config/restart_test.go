package config

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

func TestRestartNeeded(t *testing.T) {
	tests := []struct {
		name   string
		change func(c *Config)
		want   []string
	}{
		{"nothing", func(*Config) {}, nil},
		{"admission only: applied by a reload", func(c *Config) { c.Admission.Namespaces = []string{"ingress"} }, nil},
		{"mapping sources", func(c *Config) { c.Plugin.MappingSources = []string{"cri"} }, []string{"[plugin]"}},
		{"deadline", func(c *Config) { c.Plugin.Deadline.Duration = time.Second }, []string{"[plugin]"}},
		{"several, sorted", func(c *Config) { c.Log.Level = "debug"; c.HCN.Network = "x"; c.Admin.Listen = "" },
			[]string{"[admin]", "[hcn]", "[log]"}},
		{"nri and containerd", func(c *Config) { c.NRI.PluginIndex = "10"; c.Containerd.Namespace = "x" }, []string{"[containerd]", "[nri]"}},
		{"hyperv", func(c *Config) { c.HyperV.NCProxy = "127.0.0.1:6669" }, []string{"[hyperv]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			next := Default()
			tt.change(&next)
			if got := Default().RestartNeeded(next); !slices.Equal(got, tt.want) {
				t.Fatalf("RestartNeeded = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNRISourceRejectedOnWindows(t *testing.T) {
	c := Default()
	c.Plugin.Source = SourceNRI
	if err := c.ValidateOn("/etc/x.toml", nil, "linux"); err != nil {
		t.Fatalf("linux: %v", err)
	}
	want := `config: /etc/x.toml: plugin.source = "nri": stock containerd on Windows (checked against v2.4.2) opens no NRI socket and sends no NRI pod events; use containerd or auto (which follow containerd's events there)`
	if err := c.ValidateOn("/etc/x.toml", nil, "windows"); err == nil || err.Error() != want {
		t.Fatalf("windows: %v\nwant %s", err, want)
	}
	for _, ok := range []string{SourceAuto, SourceContainerd} {
		c.Plugin.Source = ok
		if err := c.ValidateOn("/etc/x.toml", nil, "windows"); err != nil {
			t.Errorf("windows, %s: %v", ok, err)
		}
	}
}

func TestSimulatedBackendRejectedOnWindows(t *testing.T) {
	c := Default()
	c.HCN.Backend, c.HCN.SimulatorAddress = BackendSimulated, "tcp://127.0.0.1:1"
	if err := c.ValidateOn("/etc/x.toml", nil, "linux"); err != nil {
		t.Fatalf("linux: %v", err)
	}
	err := c.ValidateOn("/etc/x.toml", nil, "windows")
	want := `config: /etc/x.toml: hcn.backend = "simulated": the HNS simulator is a test double for Linux tests and demos and is not part of the Windows build; use windows`
	if err == nil || err.Error() != want {
		t.Fatalf("windows: %v, want %q", err, want)
	}
}

// Every field of every section counts: a field added later and forgotten in
// RestartNeeded fails here.
func TestRestartNeededSeesEveryField(t *testing.T) {
	base := Default()
	cv := reflect.ValueOf(&base).Elem()
	for i := range cv.NumField() {
		section := cv.Type().Field(i)
		for j := range section.Type.NumField() {
			field := section.Type.Field(j)
			t.Run(section.Name+"."+field.Name, func(t *testing.T) {
				next := Default()
				f := reflect.ValueOf(&next).Elem().Field(i).Field(j)
				switch f.Kind() {
				case reflect.String:
					f.SetString(f.String() + "x")
				case reflect.Bool:
					f.SetBool(!f.Bool())
				case reflect.Int:
					f.SetInt(f.Int() + 1)
				case reflect.Slice:
					f.Set(reflect.Append(f, reflect.ValueOf("x")))
				case reflect.Struct: // Duration
					f.Field(0).SetInt(f.Field(0).Int() + 1)
				default:
					t.Fatalf("field kind %s not covered by this test", f.Kind())
				}
				got := base.RestartNeeded(next)
				want := "[" + section.Tag.Get("toml") + "]"
				if section.Name == "Admission" && field.Name == "NetworkPolicy" {
					if !slices.Equal(got, []string{"admission.network_policy"}) {
						t.Fatalf("admission.network_policy changed: %v, want it to need a restart", got)
					}
					return
				}
				if section.Name == "Admission" {
					if len(got) != 0 {
						t.Fatalf("an admission change needs no restart, got %v", got)
					}
					return
				}
				if !slices.Equal(got, []string{want}) {
					t.Fatalf("RestartNeeded = %v, want %v", got, []string{want})
				}
			})
		}
	}
}
