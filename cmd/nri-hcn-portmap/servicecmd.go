package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
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
  nri-hcn-portmap service absent                    fail when the service is installed on this node (the
                                                    DaemonSet's init step: a node never runs both)
`

func serviceCmd(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, serviceUsage)
		return usageError{error: errors.New("service: want install, uninstall or absent")}
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
		cfg, err := serviceConfig(*cfgPath)
		if err != nil {
			return err
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
		if err := service.Available(); err != nil { // before a folder is changed
			return err
		}
		// the folders the service makes files in are the administrators'
		// before it is registered: at start it refuses any other
		taken, err := takeFolders(nodefs.Checker{FS: nodefs.OSFS()}, serviceFolder(), serviceFolders(cfg), nodefs.MakePrivate, folderNames)
		for _, t := range taken {
			fmt.Fprintln(stdout, t)
		}
		if err != nil {
			return err
		}
		if err := service.Install(plan); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "service %s installed (%s %s); start it with: sc.exe start %s\n", plan.Name, plan.Exe, strings.Join(plan.Args, " "), plan.Name)
		return nil
	case "absent":
		if err := service.Absent(service.Name); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "no service %s is installed on this node\n", service.Name)
		return nil
	case "uninstall":
		if err := service.Uninstall(service.Name); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "service %s removed; run `nri-hcn-portmap cleanup` to delete the endpoints it created\n", service.Name)
		return nil
	}
	return usageError{error: fmt.Errorf("service: unknown subcommand %q (want install, uninstall or absent)", args[0])}
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

// serviceConfig is the configuration the service would start with: the
// file named (validated, as at start), else the default file when it
// exists, else the defaults.
func serviceConfig(path string) (config.Config, error) {
	if path == "" {
		if _, err := os.Stat(config.DefaultPath()); err != nil {
			return config.Default(), nil
		}
		path = config.DefaultPath()
	}
	return config.LoadValidated(path)
}

// serviceFolder is the service's own folder, %ProgramData%\nri-hcn-portmap:
// its default configuration's, its log's and its admin key's.
func serviceFolder() string { return filepath.Dir(config.DefaultPath()) }

// serviceFolders are the folders the service makes files in: its own, its
// log's and its admin key's (where admin.listen is served).
func serviceFolders(cfg config.Config) []string {
	out := []string{serviceFolder(), filepath.Dir(cmp.Or(cfg.Log.File, defaultServiceLog))}
	if cfg.Admin.Listen != "" {
		out = append(out, filepath.Dir(cfg.Admin.KeyFile))
	}
	return out
}

// takeFolders makes each of folders the node administrators' own, as the
// service's start wants them (nodefs.CheckFolder): a missing one is made
// theirs; the service's own folder (own), which the documented install
// makes with New-Item under ProgramData, where it inherits BUILTIN\Users'
// right to add files, is given to them, and said so; any other folder that
// others may change is refused, naming who and the fix: install changes
// no folder but the service's own and the ones it makes. Then every entry
// of each (list) must be theirs as well: a file someone added while the
// folder let them (a log rotation's name, a key) is refused, naming it.
func takeFolders(c nodefs.Checker, own string, folders []string, take func(string) error, list func(string) ([]string, error)) (said []string, err error) {
	var done []string
	for _, dir := range folders {
		if slices.ContainsFunc(done, func(d string) bool { return samePath(d, dir) }) {
			continue
		}
		done = append(done, dir)
		err := c.CheckFolder(dir)
		var we *nodefs.WritableError
		switch {
		case err == nil:
		case errors.Is(err, os.ErrNotExist):
		case errors.As(err, &we) && samePath(we.Path, dir) && samePath(dir, own):
			said = append(said, fmt.Sprintf("service install: %s is now the administrators' own (SYSTEM and Administrators alone; it let %s)",
				dir, strings.Join(we.Principals, ", ")))
		default:
			return said, fmt.Errorf("service install: a folder the service makes files in: %w", err)
		}
		if err != nil {
			if err := take(dir); err != nil {
				return said, fmt.Errorf("service install: giving %s to the administrators: %w", dir, err)
			}
			if err := c.CheckFolder(dir); err != nil {
				return said, fmt.Errorf("service install: a folder the service makes files in: %w", err)
			}
		}
		if err := entriesTheirs(c, dir, list); err != nil {
			return said, fmt.Errorf("service install: in a folder the service makes files in: %w; delete it, or give it to the administrators", err)
		}
	}
	return said, nil
}

// entriesTheirs refuses an entry of dir (a file, a folder, a link) that a
// principal other than the node's administrators may change.
func entriesTheirs(c nodefs.Checker, dir string, list func(string) ([]string, error)) error {
	names, err := list(dir)
	if err != nil {
		return err
	}
	for _, name := range names {
		path := filepath.Join(dir, name)
		e, err := c.FS.Lstat(path)
		if err != nil {
			return err
		}
		check := c.Check
		if e.Kind == nodefs.Dir {
			check = c.CheckFolder
		}
		if err := check(path); err != nil {
			return err
		}
	}
	return nil
}

// folderNames lists a folder's entries by name.
func folderNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, err
}

// samePath: a and b name the same path (Windows: whatever the case).
func samePath(a, b string) bool {
	a, b = filepath.Clean(a), filepath.Clean(b)
	return a == b || (runtime.GOOS == "windows" && strings.EqualFold(a, b))
}
