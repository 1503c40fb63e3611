package deploy

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// hostProcess is how hcsshim v0.15.0 starts a HostProcess container's
// processes (internal/jobcontainers/jobcontainer.go, mounts.go,
// storage.go), with and without the bind filter (bindflt: Windows Server
// 2022 with containerd 1.7+; without: Windows Server 2019, older
// containerd):
//   - the rootfs (the image's files) is C:\hpc\ with bindflt, and
//     C:\hpc\<container ID>\ without (fallbackRootfsFormat);
//   - %CONTAINER_SANDBOX_MOUNT_POINT% (and $env:CONTAINER_SANDBOX_MOUNT_POINT)
//     in the command line, the working directory and the environment is
//     replaced by the rootfs, without its trailing backslash
//     (replaceWithMountPoint);
//   - containerd gives a HostProcess container the working directory C:\hpc
//     (internal/cri/server/container_create.go); without bindflt a working
//     directory that names no mount point is joined under the rootfs, so
//     C:\hpc becomes C:\hpc\<id>\hpc (CreateProcess);
//   - with bindflt the command line runs through "cmd /c " (CreateProcess);
//   - a volume mounted at D shows at D with bindflt (ApplyFileBinding) and,
//     both ways, as a link under the rootfs at <rootfs>\D without its drive
//     letter (setupMounts, fallbackMountSetup).
type hostProcess struct {
	bindflt bool
	id      string
}

func (h hostProcess) rootfs() string {
	if h.bindflt {
		return `C:\hpc\`
	}
	return `C:\hpc\` + h.id + `\`
}

func (h hostProcess) expand(s string) (string, bool) {
	mp := strings.TrimSuffix(h.rootfs(), `\`)
	out := strings.ReplaceAll(s, "%CONTAINER_SANDBOX_MOUNT_POINT%", mp)
	out = strings.ReplaceAll(out, "$env:CONTAINER_SANDBOX_MOUNT_POINT", mp)
	return out, out != s
}

func (h hostProcess) workDir() string {
	wd, changed := h.expand(`C:\hpc`)
	if !changed && !h.bindflt {
		wd = h.rootfs() + strings.TrimPrefix(wd, `C:\`)
	}
	return wd
}

// argv is the process's arguments as hcsshim runs them (cmd /c first with
// bindflt).
func (h hostProcess) argv(args []string) []string {
	var out []string
	if h.bindflt {
		out = []string{"cmd", "/c"}
	}
	for _, a := range args {
		e, _ := h.expand(a)
		out = append(out, e)
	}
	return out
}

// abs resolves a path as the process sees it: absolute as it is, relative
// under its working directory.
func (h hostProcess) abs(p string) string {
	p = strings.ReplaceAll(p, "/", `\`)
	if len(p) > 2 && p[1] == ':' {
		return p
	}
	return strings.TrimSuffix(h.workDir(), `\`) + `\` + p
}

// visible lists where a file of a volume mounted at dest shows.
func (h hostProcess) visible(dest, file string) []string {
	d := strings.ReplaceAll(strings.TrimPrefix(dest, "C:"), "/", `\`)
	out := []string{h.rootfs() + strings.TrimPrefix(d, `\`) + `\` + file}
	if h.bindflt {
		out = append(out, `C:`+d+`\`+file)
	}
	return out
}

// HostProcess paths that hold with and without the bind filter (issue 30,
// 4): each container's executable is the image's, each --config is the
// ConfigMap's file in its volume, and the cleanup's readiness marker is
// read where it is written, under both of hcsshim's layouts. The chart as
// it was (a relative config path) fails without bindflt: shown in the
// test, so that it can fail.
func TestHostProcessPathsWithAndWithoutBindflt(t *testing.T) {
	plugin := decodeAll(t, render(t, "nri-hcn-portmap")).daemonSets
	cleanup := decodeAll(t, render(t, "nri-hcn-portmap", "daemonset.enabled=false", "cleanup.enabled=true")).daemonSets
	if len(plugin) != 1 || len(cleanup) != 1 {
		t.Fatalf("%d plugin and %d cleanup DaemonSets", len(plugin), len(cleanup))
	}
	for _, mode := range []hostProcess{{bindflt: true, id: "c0ffee"}, {bindflt: false, id: "c0ffee"}} {
		name := map[bool]string{true: "bindflt", false: "no-bindflt"}[mode.bindflt]
		t.Run(name, func(t *testing.T) {
			if err := pathsHold(mode, plugin[0]); err != "" {
				t.Errorf("plugin DaemonSet: %s", err)
			}
			if err := pathsHold(mode, cleanup[0]); err != "" {
				t.Errorf("cleanup DaemonSet: %s", err)
			}
		})
	}
	// the chart before: relative to the working directory
	old := plugin[0].DeepCopy()
	c := &old.Spec.Template.Spec.Containers[0]
	c.Command, c.Args = []string{"nri-hcn-portmap.exe"}, []string{"run", "--config", "etc/nri-hcn-portmap/config.toml"}
	if err := pathsHold(hostProcess{bindflt: false, id: "c0ffee"}, *old); !strings.Contains(err, "config") {
		t.Errorf("the relative config path holds without bindflt (%q): the model cannot tell a broken chart", err)
	}
}

// pathsHold says what does not hold of ds's container under mode ("" when
// everything does).
func pathsHold(mode hostProcess, ds appsv1.DaemonSet) string {
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	exe := mode.rootfs() + "nri-hcn-portmap.exe" // the image's file (deploy/Dockerfile)
	var errs []string
	check := func(what string, args []string) {
		argv := mode.argv(args)
		// the executable: the first of the command (cmd /c's first word with bindflt)
		words := argv
		if mode.bindflt {
			words = argv[2:]
		}
		if len(words) > 0 && words[0] == "cmd.exe" && len(words) > 2 && words[1] == "/c" { // the chart's own cmd /c
			words = strings.Fields(strings.Join(words[2:], " "))
		}
		if len(words) == 0 {
			errs = append(errs, what+": no command")
			return
		}
		if mode.abs(words[0]) != exe && words[0] != "nri-hcn-portmap.exe" { // on PATH: hcsshim adds the rootfs
			errs = append(errs, what+": runs "+words[0]+", not "+exe)
		}
		for i, w := range words {
			if w != "--config" || i+1 >= len(words) {
				continue
			}
			cfg := mode.abs(words[i+1])
			ok := false
			for _, m := range c.VolumeMounts {
				for _, v := range mode.visible(m.MountPath, "config.toml") {
					ok = ok || strings.EqualFold(v, cfg)
				}
			}
			if !ok {
				errs = append(errs, what+": config "+cfg+" is where no ConfigMap volume shows")
			}
		}
	}
	check("command", append(append([]string{}, c.Command...), c.Args...))
	for what, p := range map[string][]string{"liveness": probe(c.LivenessProbe), "readiness": probe(c.ReadinessProbe)} {
		if len(p) > 0 && !strings.Contains(strings.Join(p, " "), "cleanup-done") {
			check(what+" probe", p)
		}
	}
	// the cleanup's marker: written by the command, read by the probe
	all := strings.Join(append(c.Command, c.Args...), " ")
	if strings.Contains(all, "cleanup-done") {
		written := markerOf(mode, mode.argv(append(append([]string{}, c.Command...), c.Args...)), "echo done> ")
		read := markerOf(mode, mode.argv(probe(c.ReadinessProbe)), "if exist ")
		if written == "" || written != read {
			errs = append(errs, "the readiness marker is written at "+written+" and read at "+read)
		}
	}
	return strings.Join(errs, "; ")
}

func probe(p *corev1.Probe) []string {
	if p == nil || p.Exec == nil {
		return nil
	}
	return p.Exec.Command
}

// markerOf is the absolute path after prefix in a command line.
func markerOf(mode hostProcess, argv []string, prefix string) string {
	line := strings.Join(argv, " ")
	i := strings.Index(line, prefix)
	if i < 0 {
		return ""
	}
	rest := strings.Fields(line[i+len(prefix):])
	if len(rest) == 0 {
		return ""
	}
	return mode.abs(strings.TrimSuffix(rest[0], ")"))
}
