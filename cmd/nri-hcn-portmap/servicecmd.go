package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/nodefs"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/cmd/nri-hcn-portmap/service"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
)

const serviceUsage = `Usage:
  nri-hcn-portmap service install [--config PATH] [--depends-on SERVICE]
                                                    register the Windows service; PATH (absolute) is the
                                                    configuration it runs with (checked now), the defaults
                                                    without it; --depends-on names services to start after
  nri-hcn-portmap service uninstall                 remove the service (then run cleanup to delete its endpoints)
`

func serviceCmd(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, serviceUsage)
		return usageError{error: errors.New("service: want install or uninstall")}
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, serviceUsage)
		return nil
	case "install":
		fs := newFlagSet("service install", stderr)
		cfgPath := fs.String("config", "", "configuration file the service runs with (absolute path); the defaults without it")
		dependsOn := fs.String("depends-on", "", "services to start after, comma-separated (each must be installed); none by default, and not containerd: the plugin waits for it, and a dependency makes stopping or restarting containerd fail with error 1051 unless forced")
		if err := parseArgs(fs, args[1:]); err != nil {
			return err
		}
		// the whole validation the service would do at start: a bad value
		// is refused now, not in a silent restart loop later
		if *cfgPath != "" {
			if _, err := config.LoadValidated(*cfgPath); err != nil {
				return err
			}
		}
		var deps []string
		for d := range strings.SplitSeq(*dependsOn, ",") {
			if d = strings.TrimSpace(d); d != "" {
				deps = append(deps, d)
			}
		}
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		if err := checkInstall(nodefs.Checker{FS: nodefs.OSFS()}, exe, *cfgPath); err != nil {
			return err
		}
		plan, err := service.InstallPlan(exe, *cfgPath, deps, service.Exists)
		if err != nil {
			return err
		}
		if err := service.Install(plan); err != nil {
			return err
		}
		// the service's folder (its default configuration, its log) is
		// made now, for SYSTEM and Administrators alone: under
		// ProgramData a folder inherits a DACL that lets every user add
		// files to it
		if err := nodefs.MkdirPrivate(filepath.Dir(config.DefaultPath())); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "service %s installed (%s %s); start it with: sc.exe start %s\n", plan.Name, plan.Exe, strings.Join(plan.Args, " "), plan.Name)
		return nil
	case "uninstall":
		if err := service.Uninstall(service.Name); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "service %s removed; run `nri-hcn-portmap cleanup` to delete the endpoints it created\n", service.Name)
		return nil
	}
	return usageError{error: fmt.Errorf("service: unknown subcommand %q (want install or uninstall)", args[0])}
}

// checkInstall refuses to register a SYSTEM service whose executable, or
// configuration file, someone other than the node's administrators may
// change (or replace, through a folder on its way): whoever could would
// run as SYSTEM, or decide which pods get which host ports.
func checkInstall(c nodefs.Checker, exe, cfgPath string) error {
	if err := c.Check(exe); err != nil {
		return fmt.Errorf("service install: the executable the service would run as SYSTEM: %w; or install it from a folder "+
			"only administrators may change, such as C:\\Program Files\\nri-hcn-portmap", err)
	}
	if cfgPath != "" {
		if err := c.Check(cfgPath); err != nil { // the service would refuse it at start
			return fmt.Errorf("config: %w", err)
		}
	}
	return nil
}
