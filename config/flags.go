package config

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"slices"
)

// Flags are the command-line overrides of the configuration file.
type Flags struct {
	fs          *flag.FlagSet
	configPath  string
	defaultPath string             // read when --config is not given, if it exists
	values      map[string]*string // flag name -> value
}

// flagKey is one override flag: the config key it sets and where.
type flagKey struct {
	flag, key, usage string
	field            func(*Config) *string
	aliases          []string // other spellings of the flag
}

// flagKeys maps each override flag to the config key it sets.
var flagKeys = []flagKey{
	{"source", "plugin.source", "pod event source: nri, containerd or auto", func(c *Config) *string { return &c.Plugin.Source }, nil},
	{"nri-socket", "nri.socket", "NRI socket to connect to", func(c *Config) *string { return &c.NRI.Socket }, nil},
	// --nri-plugin-name and --nri-plugin-index: containers/nri-plugins' spelling
	{"plugin-name", "nri.plugin_name", "NRI plugin name", func(c *Config) *string { return &c.NRI.PluginName }, []string{"nri-plugin-name"}},
	{"plugin-index", "nri.plugin_index", "NRI plugin index (two digits)", func(c *Config) *string { return &c.NRI.PluginIndex }, []string{"nri-plugin-index"}},
	{"containerd-address", "containerd.address", "containerd address (named pipe or socket)", func(c *Config) *string { return &c.Containerd.Address }, nil},
	{"log-level", "log.level", "log level: trace, debug, info, warn, error", func(c *Config) *string { return &c.Log.Level }, nil},
	{"log-format", "log.format", "log format: text or json", func(c *Config) *string { return &c.Log.Format }, nil},
	{"hcn-backend", "hcn.backend", "HCN backend: windows or simulated", func(c *Config) *string { return &c.HCN.Backend }, nil},
	{"hcn-simulator", "hcn.simulator_address", "address of the HNS simulator (simulated backend)", func(c *Config) *string { return &c.HCN.SimulatorAddress }, nil},
	{"admin-listen", "admin.listen", "loopback address for /healthz, /livez, /metrics and /mappings (empty disables)", func(c *Config) *string { return &c.Admin.Listen }, nil},
	{"admin-key-file", "admin.key_file", "where the plugin writes the key its admin answers prove themselves with, and the commands read it", func(c *Config) *string { return &c.Admin.KeyFile }, nil},
	{"admin-socket", "admin.socket", "named pipe (Windows) or unix socket (Linux) serving reload, for the node's administrators alone (empty disables)", func(c *Config) *string { return &c.Admin.Socket }, nil},
	{"metrics-listen", "admin.metrics_listen", "address serving GET /metrics alone, e.g. :9467 (empty: none)", func(c *Config) *string { return &c.Admin.MetricsListen }, nil},
	{"log-file", "log.file", "write the log to this file, rotated, instead of stderr", func(c *Config) *string { return &c.Log.File }, nil},
}

// RegisterFlags adds --config and every override flag to fs.
func RegisterFlags(fs *flag.FlagSet) *Flags { return RegisterFlagsFor(fs) }

// RegisterFlagsFor adds --config and the override flags of the given
// config keys (every one when none is given): a command offers only the
// flags it uses.
func RegisterFlagsFor(fs *flag.FlagSet, keys ...string) *Flags {
	f := &Flags{fs: fs, values: map[string]*string{}, defaultPath: DefaultPath()}
	fs.StringVar(&f.configPath, "config", "", "configuration file (TOML); when omitted, the environment variable "+ConfigEnv+
		" when set (the DaemonSet's: kubelet resolves it from the ConfigMap), else "+f.defaultPath+" if it exists, else the defaults")
	for _, k := range flagKeys {
		if len(keys) > 0 && !slices.Contains(keys, k.key) {
			continue
		}
		v := fs.String(k.flag, "", k.usage+" (overrides "+k.key+")")
		f.values[k.flag] = v
		for _, a := range k.aliases {
			fs.StringVar(v, a, "", "the same as --"+k.flag)
		}
	}
	return f
}

// ConfigEnv is the environment variable a configuration may come in
// instead of a file: the DaemonSet's, which kubelet resolves from its
// ConfigMap (a configMapKeyRef), so that no file, and no link a local user
// could re-point, stands between the ConfigMap and the plugin.
const ConfigEnv = "NRI_HCN_PORTMAP_CONFIG"

// ConfigPath is the configuration file in use: --config, or DefaultPath
// when that exists and ConfigEnv is not set; "" for the environment or the
// defaults.
func (f *Flags) ConfigPath() string {
	if _, env := os.LookupEnv(ConfigEnv); env && f.configPath == "" {
		return ""
	}
	if f.configPath == "" {
		if _, err := os.Stat(f.defaultPath); err == nil {
			return f.defaultPath
		}
	}
	return f.configPath
}

// Resolve loads the configuration file (ConfigPath: --config, or the
// default path when it exists, or the defaults), applies the flags that
// were set, and validates the result. Call after fs.Parse.
func (f *Flags) Resolve() (Config, error) {
	path := f.ConfigPath()
	if text, env := os.LookupEnv(ConfigEnv); env && path == "" {
		return f.resolve("environment variable "+ConfigEnv, []byte(text), nil)
	}
	if path == "" {
		return f.resolve("defaults", nil, nil)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return f.resolve(path, nil, fmt.Errorf("config: %w", err))
	}
	return f.resolve(path, data, nil)
}

// ResolveData is Resolve with the file's content handed over, named name in
// errors: the configuration NRI passes a plugin the runtime launched. Empty
// data falls back to Resolve (--config, or the defaults); otherwise it
// replaces --config. Flags still win.
func (f *Flags) ResolveData(name string, data []byte) (Config, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return f.Resolve()
	}
	return f.resolve(name, data, nil)
}

// resolve decodes data (named source) over the defaults, applies the flags
// that were set and validates; readErr is a failure to read the file.
func (f *Flags) resolve(source string, data []byte, readErr error) (Config, error) {
	cfg := Default()
	loadErr := readErr
	if loadErr == nil && data != nil {
		if loadErr = Decode(source, data, &cfg); loadErr != nil {
			// the defaults and what the broken file still says of the
			// keys flags set, line by line (where reload asks the plugin)
			cfg = Default()
			written := said(data)
			for _, k := range flagKeys {
				if v, ok := written[k.key]; ok {
					*k.field(&cfg) = v
				}
			}
		}
	}
	origin := map[string]string{}
	if data != nil && loadErr == nil {
		for key, line := range keyLines(data) {
			origin[key] = fmt.Sprintf("%s:%d", source, line)
		}
	}
	f.fs.Visit(func(fl *flag.Flag) {
		for _, k := range flagKeys {
			if k.flag == fl.Name || slices.Contains(k.aliases, fl.Name) {
				*k.field(&cfg) = *f.values[k.flag]
				origin[k.key] = fmt.Sprintf("flag --%s", fl.Name)
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

// fileOrigins names each key of the file by file:line, for errors.
func fileOrigins(path string) map[string]string {
	origin := map[string]string{}
	if data, err := os.ReadFile(path); err == nil {
		for key, line := range keyLines(data) {
			origin[key] = fmt.Sprintf("%s:%d", path, line)
		}
	}
	return origin
}

// LoadValidated loads path over the defaults and validates the result as
// the plugin would at start; errors name the file, the line, the key and
// the value.
func LoadValidated(path string) (Config, error) {
	cfg, err := Load(path)
	if err != nil {
		return cfg, err
	}
	return cfg, cfg.Validate(path, fileOrigins(path))
}
