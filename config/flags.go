package config

import (
	"flag"
	"fmt"
)

// Flags are the command-line overrides of the configuration file.
type Flags struct {
	fs         *flag.FlagSet
	configPath string
	values     map[string]*string // flag name -> value
}

// flagKeys maps each override flag to the config key it sets.
var flagKeys = []struct{ flag, key, usage string }{
	{"source", "plugin.source", "pod event source: nri, containerd or auto"},
	{"nri-socket", "nri.socket", "NRI socket to connect to"},
	{"plugin-name", "nri.plugin_name", "NRI plugin name"},
	{"plugin-index", "nri.plugin_index", "NRI plugin index (two digits)"},
	{"containerd-address", "containerd.address", "containerd address (named pipe or socket)"},
	{"log-level", "log.level", "log level: trace, debug, info, warn, error"},
	{"log-format", "log.format", "log format: text or json"},
	{"hcn-backend", "hcn.backend", "HCN backend: windows or simulated"},
	{"hcn-simulator", "hcn.simulator_address", "address of the HNS simulator (simulated backend)"},
	{"admin-listen", "admin.listen", "address for /healthz, /metrics and /reload (empty disables)"},
	{"log-file", "log.file", "write the log to this file, rotated, instead of stderr"},
}

// RegisterFlags adds --config and the override flags to fs.
func RegisterFlags(fs *flag.FlagSet) *Flags {
	f := &Flags{fs: fs, values: map[string]*string{}}
	fs.StringVar(&f.configPath, "config", "", "configuration file (TOML); defaults apply when omitted")
	for _, k := range flagKeys {
		f.values[k.flag] = fs.String(k.flag, "", k.usage+" (overrides "+k.key+")")
	}
	return f
}

// ConfigPath is the --config value.
func (f *Flags) ConfigPath() string { return f.configPath }

// Resolve loads the file named by --config (or the defaults), applies the
// flags that were set, and validates the result. Call after fs.Parse.
func (f *Flags) Resolve() (Config, error) {
	cfg := Default()
	source := "defaults"
	var loadErr error
	if f.configPath != "" {
		if cfg, loadErr = Load(f.configPath); loadErr != nil {
			cfg = Default()
		}
		source = f.configPath
	}
	origin := map[string]string{}
	f.fs.Visit(func(fl *flag.Flag) {
		for _, k := range flagKeys {
			if k.flag == fl.Name {
				*cfg.field(k.key) = *f.values[k.flag]
				origin[k.key] = fmt.Sprintf("flag --%s", k.flag)
			}
		}
	})
	if loadErr != nil {
		// the defaults and flags, for callers that can still use them
		// (the admin address of `reload`); the error stands
		return cfg, loadErr
	}
	return cfg, cfg.Validate(source, origin)
}

func (c *Config) field(key string) *string {
	switch key {
	case "plugin.source":
		return &c.Plugin.Source
	case "nri.socket":
		return &c.NRI.Socket
	case "nri.plugin_name":
		return &c.NRI.PluginName
	case "nri.plugin_index":
		return &c.NRI.PluginIndex
	case "containerd.address":
		return &c.Containerd.Address
	case "log.level":
		return &c.Log.Level
	case "log.format":
		return &c.Log.Format
	case "hcn.backend":
		return &c.HCN.Backend
	case "hcn.simulator_address":
		return &c.HCN.SimulatorAddress
	case "admin.listen":
		return &c.Admin.Listen
	case "log.file":
		return &c.Log.File
	}
	panic("config: no string field " + key)
}
