// Command fakecni is a CNI plugin for the end-to-end tests (no CNI plugin
// is installed here): it speaks the CNI protocol (CNI_COMMAND ADD, DEL,
// CHECK, VERSION; the network configuration on stdin, the result on
// stdout) and sets nothing up. ADD of the pod's interface reports an
// address and the DNS in the network configuration's "dns" (as win-bridge
// and sdnbridge report theirs), so that containerd's CRI records a CNI
// result, DNS included, in the sandbox's metadata as it does on a node;
// ADD of "lo" is what containerd's loopback network gets (installed as
// "loopback" too). The netns containerd made is left as it is.
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
)

const version = "1.0.0"

type dns struct {
	Nameservers []string `json:"nameservers,omitempty"`
	Domain      string   `json:"domain,omitempty"`
	Search      []string `json:"search,omitempty"`
	Options     []string `json:"options,omitempty"`
}

func main() {
	if err := run(os.Getenv("CNI_COMMAND"), os.Getenv("CNI_IFNAME"), os.Getenv("CNI_NETNS"), os.Stdin, os.Stdout); err != nil {
		json.NewEncoder(os.Stdout).Encode(map[string]any{"cniVersion": version, "code": 999, "msg": err.Error()})
		os.Exit(1)
	}
}

func run(cmd, ifname, netns string, in io.Reader, out io.Writer) error {
	var conf struct {
		CNIVersion string `json:"cniVersion"`
		DNS        dns    `json:"dns"`
	}
	if cmd != "VERSION" {
		if err := json.NewDecoder(in).Decode(&conf); err != nil {
			return fmt.Errorf("network configuration: %w", err)
		}
	}
	enc := json.NewEncoder(out)
	switch cmd {
	case "VERSION":
		return enc.Encode(map[string]any{"cniVersion": version, "supportedVersions": []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0"}})
	case "DEL", "CHECK":
		return nil
	case "ADD":
		v := conf.CNIVersion
		if v == "" {
			v = version
		}
		if ifname == "lo" {
			return enc.Encode(map[string]any{"cniVersion": v, "interfaces": []any{map[string]string{"name": "lo", "sandbox": netns}},
				"ips": []any{map[string]any{"interface": 0, "address": "127.0.0.1/8"}}, "dns": map[string]any{}})
		}
		return enc.Encode(map[string]any{"cniVersion": v, "interfaces": []any{map[string]string{"name": ifname, "sandbox": netns}},
			"ips": []any{map[string]any{"interface": 0, "address": "10.22.0.5/24", "gateway": "10.22.0.1"}}, "dns": conf.DNS})
	}
	return fmt.Errorf("CNI_COMMAND %q is not supported", cmd)
}
