package containerd

import (
	"fmt"
	"sort"
	"strings"

	"github.com/pelletier/go-toml/v2"
)

// RuntimeHandler is a CRI runtime handler of containerd's configuration as
// it concerns host ports: whether its pods are Hyper-V isolated (runhcs
// options SandboxIsolation = 1, HYPERVISOR) and the ncproxy its shim asks
// to set their network up (NCProxyAddr; "" for none).
type RuntimeHandler struct {
	Name    string
	HyperV  bool
	NCProxy string
}

// criRuntimes are where containerd's configuration keeps the CRI runtime
// handlers: version 2 (containerd 1.7) and version 3 (2.x).
var criRuntimes = [][]string{
	{"plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes"},
	{"plugins", "io.containerd.cri.v1.runtime", "containerd", "runtimes"},
}

// RuntimeHandlers reads the CRI runtime handlers of containerd's
// configuration file data (config.toml), sorted by name. The runhcs
// options are matched by name without case, as containerd decodes them
// into hcsshim's options.
func RuntimeHandlers(data []byte) ([]RuntimeHandler, error) {
	var cfg map[string]any
	if err := toml.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("containerd's configuration: %w", err)
	}
	var out []RuntimeHandler
	for _, path := range criRuntimes {
		runtimes, _ := walk(cfg, path).(map[string]any)
		for name, v := range runtimes {
			rt, _ := v.(map[string]any)
			opts, _ := field(rt, "options").(map[string]any)
			h := RuntimeHandler{Name: name}
			switch iso := field(opts, "SandboxIsolation").(type) {
			case int64:
				h.HyperV = iso == 1
			case string:
				h.HyperV = strings.EqualFold(iso, "HYPERVISOR") || iso == "1"
			}
			h.NCProxy, _ = field(opts, "NCProxyAddr").(string)
			out = append(out, h)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func walk(m map[string]any, path []string) any {
	var cur any = m
	for _, k := range path {
		next, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = next[k]
	}
	return cur
}

// field is m's value for key, matched without case.
func field(m map[string]any, key string) any {
	for k, v := range m {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return nil
}
