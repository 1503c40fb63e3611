// Command nri-hcn-portmap is a containerd NRI plugin for Windows nodes that
// gives pod sandboxes HNS v2 PortMapping endpoints in their own HCN
// namespace. main.go dispatches the subcommands; each lives in its own file
// (run.go wires the plugin) and the work is done by the packages under
// plugin/, hcn/ and config/.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
)

const usageFormat = `nri-hcn-portmap: HNS v2 port mappings for containerd pods on Windows

Usage:
  nri-hcn-portmap [run] [flags]        run the plugin (default; under the Windows SCM, as a service)
  nri-hcn-portmap status [flags] [-o table|json]
                                       the endpoints the plugin manages, from HCN and containerd
  nri-hcn-portmap health [--live] [flags]
                                       ask the running plugin's /healthz, or /livez with --live
                                       (exit 1 when unhealthy)
  nri-hcn-portmap reload [flags]       make the running plugin re-read its configuration
  nri-hcn-portmap cleanup [--force] [flags]
                                       detach and delete every endpoint the plugin created
                                       (refused while the plugin answers, unless --force)
  nri-hcn-portmap doctor [--selftest] [flags] [-o table|json]
                                       check the node (HNS, network, containerd, event source,
                                       NRI socket, admin address, Hyper-V pods); --selftest builds,
                                       reads back and removes a throwaway endpoint; exit 1 if unfit
  nri-hcn-portmap service install [--config PATH] [--depends-on SERVICE] | service uninstall
                                       register or remove the Windows service
  nri-hcn-portmap config default | config dump [flags]
                                       the default configuration, or the one in effect (the file
                                       and the flags), as TOML
%s  nri-hcn-portmap version | --version
                                       the version, the commit and date it was built from, and Go's

Without --config a command reads %s when it exists, else the defaults.
Run "nri-hcn-portmap COMMAND -h" for a command's flags. Exit status: 0 done, 1 failed (or
unfit, unhealthy), 2 a wrong command line.
`

// usage lists the subcommands of this build (the simulator is not part of
// the Windows one).
func usage() string { return fmt.Sprintf(usageFormat, simulatorUsage, config.DefaultPath()) }

func main() {
	os.Exit(mainArgs(os.Args[1:], os.Stdout, os.Stderr))
}

func mainArgs(args []string, stdout, stderr io.Writer) int {
	cmd := "run"
	switch {
	case len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help"):
		cmd = "help"
	case len(args) > 0 && (args[0] == "-version" || args[0] == "--version"):
		cmd, args = "version", args[1:]
	case len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-':
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "run":
		err = runCmd(args, stderr)
	case "status":
		err = statusCmd(args, stdout, stderr)
	case "health":
		err = adminCmd("health", args, stdout, stderr)
	case "reload":
		err = adminCmd("reload", args, stdout, stderr)
	case "cleanup":
		err = cleanupCmd(args, stdout, stderr)
	case "doctor":
		err = doctorCmd(args, stdout, stderr)
	case "service":
		err = serviceCmd(args, stdout, stderr)
	case "simulator":
		err = simulatorCmd(args, stderr)
	case "config":
		err = configCmd(args, stdout, stderr)
	case "version":
		fs := newFlagSet("version", stderr)
		if err = parseArgs(fs, args); err == nil {
			fmt.Fprintln(stdout, thisBuild())
		}
	case "help":
		fmt.Fprint(stdout, usage())
	default:
		fmt.Fprintf(stderr, "unknown command %q\n\n%s", cmd, usage())
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) {
		if !ue.said {
			fmt.Fprintln(stderr, "nri-hcn-portmap:", err)
		}
		return 2
	}
	if err != nil {
		fmt.Fprintln(stderr, "nri-hcn-portmap:", err)
		return 1
	}
	return 0
}
