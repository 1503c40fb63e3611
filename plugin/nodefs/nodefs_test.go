package nodefs

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// fakeFS is a node's folders as values: each object by its path, its kind,
// a link's target and its security descriptor (SDDL) or Linux owner and
// mode; what it does not hold is missing.
type fakeFS map[string]fakeObject

type fakeObject struct {
	kind   Kind
	target string
	sddl   string // Windows: the object's SDDL
	// Linux: owner, group and mode (used when sddl is "")
	uid, gid uint32
	mode     os.FileMode
}

func (f fakeFS) Lstat(path string) (Entry, error) {
	o, ok := f[filepath.Clean(path)]
	if !ok {
		return Entry{Kind: Missing}, nil
	}
	e := Entry{Kind: o.kind, Target: o.target}
	if o.sddl == "" {
		e.Grants = ModeGrants(o.uid, o.gid, o.mode, 4242, o.kind)
		e.Readers = ModeReaders(o.uid, o.gid, o.mode, 4242)
		return e, nil
	}
	var err error
	if e.Grants, err = Grants(o.sddl, selfSID, o.kind); err != nil {
		return e, err
	}
	e.Readers, err = Readers(o.sddl, selfSID)
	return e, err
}

// at is a path under the test's root (C:\ as a Windows binary, / on
// Linux), from slash-separated names.
func at(p string) string {
	r := string(filepath.Separator)
	if runtime.GOOS == "windows" {
		r = `C:\`
	}
	return filepath.Join(r, filepath.FromSlash(p))
}

// kubeletVolume is a stock Windows node's HostProcess pod with a ConfigMap
// volume (the chart's before issue 53), without the bind filter: hcsshim
// links the mount under the container's rootfs (C:\hpc\<id>\etc\nri-hcn-portmap)
// to kubelet's volume folder, where kubelet's atomic writer keeps the file
// behind two links (config.toml -> ..data\config.toml, ..data -> the
// timestamped folder). Every folder is made with a plain MkdirAll by
// SYSTEM, so each inherits C:\'s default DACL: two levels down
// (C:\var\lib) and five (C:\var\lib\kubelet\pods\<uid>) alike. Each link
// carries what Windows gives it: a directory link (..data, made by Go's
// os.Symlink with SYMBOLIC_LINK_FLAG_DIRECTORY, src/os/file_windows.go) is
// a directory object and inherits its folder's container-inherit ACEs, so
// BUILTIN\Users hold FILE_WRITE_DATA on it (C:\'s (CI)(IO)(DC), carried
// down); a file link (config.toml) inherits the object-inherit ACEs, as a
// file (reasoned, standard inheritance; the real-node checklist settles
// it).
func kubeletVolume() fakeFS {
	dir := func(p string) (string, fakeObject) { return at(p), fakeObject{kind: Dir, sddl: sddlKubeletFolder} }
	link := func(p, to string) (string, fakeObject) {
		sddl := sddlKubeletFolder // a directory link
		if strings.HasSuffix(p, ".toml") {
			sddl = sddlKubeletFile
		}
		return at(p), fakeObject{kind: Link, target: to, sddl: sddl}
	}
	f := fakeFS{at(""): {kind: Dir, sddl: sddlDriveRoot}}
	vol := "var/lib/kubelet/pods/5e1f/volumes/kubernetes.io~configmap/config"
	for _, p := range []string{"hpc", "hpc/c0ffee", "hpc/c0ffee/etc", "var", "var/lib", "var/lib/kubelet", "var/lib/kubelet/pods",
		"var/lib/kubelet/pods/5e1f", "var/lib/kubelet/pods/5e1f/volumes", "var/lib/kubelet/pods/5e1f/volumes/kubernetes.io~configmap",
		vol, vol + "/..2026_12_04_17_57_38.123456789"} {
		k, v := dir(p)
		f[k] = v
	}
	for _, l := range [][2]string{{"hpc/c0ffee/etc/nri-hcn-portmap", at(vol)},
		{vol + "/config.toml", filepath.FromSlash("..data/config.toml")}, {vol + "/..data", "..2026_12_04_17_57_38.123456789"}} {
		k, v := link(l[0], l[1])
		f[k] = v
	}
	f[at(vol+"/..2026_12_04_17_57_38.123456789/config.toml")] = fakeObject{kind: File, sddl: sddlKubeletFile}
	return f
}

// What matters is whether someone else can change what the plugin reads:
// kubelet's inherited folders (Users may add files and folders) and
// containerd's and the service's own pass; a file, link or folder on the
// way that someone else may write, replace, re-point or re-permission is
// refused, naming it and them; a file not made yet is refused where others
// may add to its folder.
func TestCheckJudgesEveryObjectOnThePath(t *testing.T) {
	const cfg = "hpc/c0ffee/etc/nri-hcn-portmap/config.toml"
	vol := "var/lib/kubelet/pods/5e1f/volumes/kubernetes.io~configmap/config"
	ts := vol + "/..2026_12_04_17_57_38.123456789"
	// with is the volume with its directory links given back to the
	// administrators (icacls /l), changed: each row tests its own rule
	with := func(change func(fakeFS)) fakeFS {
		f := kubeletVolume()
		for p, o := range f {
			if o.kind == Link && o.sddl == sddlKubeletFolder {
				o.sddl = sddlContainerd
				f[p] = o
			}
		}
		change(f)
		return f
	}
	hostile := "O:BAD:AI(A;OICIID;FA;;;SY)(A;OICIID;FA;;;BA)(A;OICI;0x1301bf;;;BU)"
	for _, tc := range []struct {
		name   string
		fs     fakeFS
		path   string
		folder bool
		refuse string // the path refused ("": passes)
		who    string // and a fragment of who is named
	}{
		// issue 53: through a ConfigMap volume's links, a local user may
		// re-point the directory links (the DaemonSet reads its
		// configuration from the environment since, test/deploy)
		{"a ConfigMap volume on a stock node: the mount's directory link Users may re-point", kubeletVolume(), cfg, false,
			"hpc/c0ffee/etc/nri-hcn-portmap", `BUILTIN\Users (S-1-5-32-545) (may write it)`},
		{"the file by its volume path: ..data, a directory link Users may re-point", kubeletVolume(), vol + "/config.toml", false,
			vol + "/..data", `BUILTIN\Users (S-1-5-32-545) (may write it)`},
		{"a file link with its folder's object-inherit ACEs passes", with(func(f fakeFS) {
			f[at(vol+"/..data")] = fakeObject{kind: Link, target: "..2026_12_04_17_57_38.123456789", sddl: sddlContainerd}
		}), vol + "/config.toml", false, "", ""},
		{"a link Users may only add folders to re-points nothing", with(func(f fakeFS) {
			f[at(vol+"/..data")] = fakeObject{kind: Link, target: "..2026_12_04_17_57_38.123456789", sddl: "O:SYD:(A;;FA;;;SY)(A;;0x1200ad;;;BU)"}
		}), vol + "/config.toml", false, "", ""},
		{"a junction Users may set attributes on (re-point)", with(func(f fakeFS) {
			f[at(vol+"/..data")] = fakeObject{kind: Link, target: "..2026_12_04_17_57_38.123456789", sddl: "O:SYD:(A;;FA;;;SY)(A;;0x1201a9;;;BU)"}
		}), vol + "/config.toml", false, vol + "/..data", "may write it"},
		{"two levels down: a file in C:\\var\\lib", with(func(f fakeFS) { f[at("var/lib/x.toml")] = fakeObject{kind: File, sddl: sddlKubeletFile} }),
			"var/lib/x.toml", false, "", ""},
		{"a file Users may write", with(func(f fakeFS) {
			f[at(ts+"/config.toml")] = fakeObject{kind: File, sddl: "O:SYD:(A;;FA;;;SY)(A;;FW;;;BU)"}
		}),
			cfg, false, ts + "/config.toml", `BUILTIN\Users (S-1-5-32-545) (may write it)`},
		{"a file a user owns", with(func(f fakeFS) {
			f[at(ts+"/config.toml")] = fakeObject{kind: File, sddl: "O:S-1-5-21-1-2-3-1001D:(A;;FA;;;SY)"}
		}), cfg, false, ts + "/config.toml", "S-1-5-21-1-2-3-1001, its owner (may change its permissions)"},
		{"the timestamped folder: Users may delete what it holds", with(func(f fakeFS) {
			f[at(ts)] = fakeObject{kind: Dir, sddl: "O:SYD:(A;;FA;;;SY)(A;;DT;;;BU)"}
		}), cfg, false, ts, "delete or rename what it holds"},
		{"the volume folder: Users may modify (delete) it", with(func(f fakeFS) { f[at(vol)] = fakeObject{kind: Dir, sddl: hostile} }),
			cfg, false, vol, "delete or rename it"},
		{"a folder five levels up: Users may re-permission it", with(func(f fakeFS) {
			f[at("var/lib/kubelet/pods/5e1f")] = fakeObject{kind: Dir, sddl: "O:SYD:(A;;FA;;;SY)(A;;WD;;;BU)"}
		}), cfg, false, "var/lib/kubelet/pods/5e1f", "change its permissions"},
		{"the ..data link a user made", with(func(f fakeFS) {
			f[at(vol+"/..data")] = fakeObject{kind: Link, target: "..2026_12_04_17_57_38.123456789", sddl: "O:S-1-5-21-1-2-3-1001D:(A;;FA;;;SY)"}
		}), cfg, false, vol + "/..data", "its owner"},
		{"the mount link points into a folder a user owns", with(func(f fakeFS) {
			f[at("hpc/c0ffee/etc/nri-hcn-portmap")] = fakeObject{kind: Link, target: at("users/mallory/config"), sddl: sddlKubeletFile}
			f[at("users")] = fakeObject{kind: Dir, sddl: sddlKubeletFolder}
			f[at("users/mallory")] = fakeObject{kind: Dir, sddl: "O:S-1-5-21-1-2-3-1001D:(A;OICI;FA;;;S-1-5-21-1-2-3-1001)"}
			f[at("users/mallory/config")] = fakeObject{kind: Dir, sddl: sddlKubeletFolder}
			f[at("users/mallory/config/config.toml")] = fakeObject{kind: File, sddl: sddlKubeletFile}
		}), cfg, false, "users/mallory", "S-1-5-21-1-2-3-1001"},
		{"a NULL DACL on the file", with(func(f fakeFS) { f[at(ts+"/config.toml")] = fakeObject{kind: File, sddl: "O:SYD:NO_ACCESS_CONTROL"} }),
			cfg, false, ts + "/config.toml", "NULL DACL"},
		{"a log file not made yet where Users may add files", kubeletVolume(), "var/lib/kubelet/new.log", false, "var/lib/kubelet", "add files to it"},
		{"a folder the plugin writes in, where Users may add", kubeletVolume(), "var/lib/kubelet", true, "var/lib/kubelet", "add files to it"},
		{"the service's own folder and a log not made yet", with(func(f fakeFS) {
			f[at("ProgramData")] = fakeObject{kind: Dir, sddl: "O:SYD:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICI;0x1200a9;;;BU)(A;CI;DCLCRPCR;;;BU)"}
			f[at("ProgramData/nri-hcn-portmap")] = fakeObject{kind: Dir, sddl: sddlPrivate}
		}), "ProgramData/nri-hcn-portmap/nri-hcn-portmap.log", false, "", ""},
		{"the service's folder made without its DACL, a log not made yet", with(func(f fakeFS) {
			f[at("ProgramData")] = fakeObject{kind: Dir, sddl: "O:SYD:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICI;0x1200a9;;;BU)(A;CI;DCLCRPCR;;;BU)"}
			f[at("ProgramData/nri-hcn-portmap")] = fakeObject{kind: Dir, sddl: sddlProgramData}
		}), "ProgramData/nri-hcn-portmap/nri-hcn-portmap.log", false, "ProgramData/nri-hcn-portmap", "add files to it"},
		{"containerd's protected folders", with(func(f fakeFS) {
			f[at("ProgramData")] = fakeObject{kind: Dir, sddl: "O:SYD:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICI;0x1200a9;;;BU)(A;CI;DCLCRPCR;;;BU)"}
			f[at("ProgramData/containerd")] = fakeObject{kind: Dir, sddl: sddlContainerd}
			f[at("ProgramData/containerd/root")] = fakeObject{kind: Dir, sddl: sddlContainerd}
		}), "ProgramData/containerd/root", true, "", ""},
		{"a folder the plugin writes in is a link", with(func(f fakeFS) {
			f[at("run")] = fakeObject{kind: Dir, sddl: sddlContainerd}
			f[at("run/nri-hcn-portmap")] = fakeObject{kind: Link, target: at("run/real"), sddl: sddlContainerd}
			f[at("run/real")] = fakeObject{kind: Dir, sddl: sddlContainerd}
		}), "run/nri-hcn-portmap", true, "run/nri-hcn-portmap is a link", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Checker{FS: tc.fs}
			check := c.Check
			if tc.folder {
				check = c.CheckFolder
			}
			err := check(at(tc.path))
			if tc.refuse == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var we *WritableError
			switch {
			case strings.Contains(tc.refuse, " "): // not a writer: a sentence
				if err == nil || !strings.Contains(err.Error(), strings.Replace(tc.refuse, "run/nri-hcn-portmap", at("run/nri-hcn-portmap"), 1)) {
					t.Fatalf("got %v, want %q", err, tc.refuse)
				}
			case !errors.As(err, &we) || we.Path != at(tc.refuse) || !strings.Contains(err.Error(), tc.who) || !errors.Is(err, ErrWritable):
				t.Fatalf("got %v, want %s refused naming %q", err, at(tc.refuse), tc.who)
			}
			// a link's fix changes the link, not its target (issue 53)
			linkFix := map[string]string{"windows": `" /l /inheritance:r`}[runtime.GOOS]
			if linkFix == "" {
				linkFix = "chown -h"
			}
			if o := tc.fs[at(tc.refuse)]; o.kind == Link && !strings.Contains(we.Fix, linkFix) {
				t.Errorf("the fix for the link %s: %q, want it to change the link itself (%s)", tc.refuse, we.Fix, linkFix)
			}
		})
	}
}

// Links are followed where the OS follows them, each judged on the way:
// a relative target from the link's folder, ".." from the folder reached,
// a loop refused, a path through a missing folder an error.
func TestCheckFollowsLinksAsTheOSDoes(t *testing.T) {
	safe := sddlContainerd
	f := fakeFS{at(""): {kind: Dir, sddl: safe}, at("a"): {kind: Dir, sddl: safe}, at("a/b"): {kind: Dir, sddl: safe},
		at("a/up"): {kind: Link, target: filepath.FromSlash("b/.."), sddl: safe}, at("a/f"): {kind: File, sddl: safe},
		at("loop"): {kind: Link, target: at("loop"), sddl: safe},
		at("open"): {kind: Dir, sddl: "O:BAD:(A;;FA;;;WD)"}, at("a/b/away"): {kind: Link, target: filepath.FromSlash("../../open/x"), sddl: safe}}
	c := Checker{FS: f}
	if err := c.Check(at("a/up/f")); err != nil {
		t.Errorf("a/up/f (a/b/../f): %v", err)
	}
	if err := c.Check(at("a/b/../f")); err != nil {
		t.Errorf("a/b/../f: %v", err)
	}
	if err := c.Check(at("loop")); err == nil || !strings.Contains(err.Error(), "links") {
		t.Errorf("a loop: %v", err)
	}
	if err := c.Check(at("nowhere/f")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("through a missing folder: %v", err)
	}
	var we *WritableError
	if err := c.Check(at("a/b/away")); !errors.As(err, &we) || we.Path != at("open") {
		t.Errorf("a link out to a folder everyone may change: %v", err)
	}
}

// The Linux reading of the same question, on owners and modes: root's
// folders and /tmp (sticky) pass on the way; a folder others may write
// without the sticky bit, a link another user owns (in a sticky folder he
// may replace it), a file others may write, and a sticky folder for a
// file not made yet are refused.
func TestCheckOnLinuxModes(t *testing.T) {
	dir := func(mode os.FileMode) fakeObject { return fakeObject{kind: Dir, mode: os.ModeDir | mode} }
	base := func() fakeFS {
		return fakeFS{at(""): dir(0o755), at("tmp"): dir(os.ModeSticky | 0o777), at("tmp/x"): dir(0o700),
			at("tmp/x/config.toml"): {kind: File, mode: 0o644}, at("etc"): dir(0o755)}
	}
	for _, tc := range []struct {
		name   string
		change func(fakeFS)
		path   string
		folder bool
		refuse string
		who    string
	}{
		{"a root-only folder under /tmp", nil, "tmp/x/config.toml", false, "", ""},
		{"the plugin's own user owns it", func(f fakeFS) { f[at("tmp/x/config.toml")] = fakeObject{kind: File, uid: 4242, mode: 0o600} }, "tmp/x/config.toml", false, "", ""},
		{"group root may write", func(f fakeFS) { f[at("tmp/x/config.toml")] = fakeObject{kind: File, mode: 0o664} }, "tmp/x/config.toml", false, "", ""},
		{"a file everyone may write", func(f fakeFS) { f[at("tmp/x/config.toml")] = fakeObject{kind: File, mode: 0o666} },
			"tmp/x/config.toml", false, "tmp/x/config.toml", "every user (mode 0666) (may write it)"},
		{"a folder a group may write", func(f fakeFS) { f[at("tmp/x")] = fakeObject{kind: Dir, gid: 1001, mode: os.ModeDir | 0o770} },
			"tmp/x/config.toml", false, "tmp/x", "(gid 1001, mode 0770) (may delete or rename what it holds)"},
		{"another user's folder", func(f fakeFS) { f[at("tmp/x")] = fakeObject{kind: Dir, uid: 1001, mode: os.ModeDir | 0o700} },
			"tmp/x/config.toml", false, "tmp/x", "(uid 1001, its owner) (may change its permissions)"},
		{"a log not made yet in sticky /tmp", nil, "tmp/new.log", false, "tmp", "every user (mode 1777) (may add files to it)"},
		{"another user's link in /tmp to a root-only folder", func(f fakeFS) {
			f[at("tmp/sock")] = fakeObject{kind: Link, uid: 1001, target: at("etc"), mode: os.ModeSymlink | 0o777}
		}, "tmp/sock/admin.sock", false, "tmp/sock", "its owner"},
		{"root's link in /tmp to a root-only folder, as a socket folder", func(f fakeFS) {
			f[at("tmp/sock")] = fakeObject{kind: Link, target: at("etc"), mode: os.ModeSymlink | 0o777}
		}, "tmp/sock", true, "is a link", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := base()
			if tc.change != nil {
				tc.change(f)
			}
			c := Checker{FS: f}
			check := c.Check
			if tc.folder {
				check = c.CheckFolder
			}
			err := check(at(tc.path))
			var we *WritableError
			switch {
			case tc.refuse == "":
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
			case strings.Contains(tc.refuse, " "):
				if err == nil || !strings.Contains(err.Error(), tc.refuse) {
					t.Fatalf("got %v, want %q", err, tc.refuse)
				}
			case !errors.As(err, &we) || we.Path != at(tc.refuse) || !strings.Contains(err.Error(), tc.who):
				t.Fatalf("got %v, want %s refused naming %q", err, at(tc.refuse), tc.who)
			}
		})
	}
}

// Issue 53: a secret (the admin key) is refused where anyone but the
// node's administrators and the plugin's account may read it, as well as
// change it: Windows' read rights (FILE_READ_DATA, GENERIC_READ or ALL),
// an owner who is not trusted, a missing or NULL DACL; Linux's group (not
// root's) and other read bits and an owner not root. What Check refuses
// is refused first; a folder is no secret.
func TestCheckSecretRefusesWhoElseMayRead(t *testing.T) {
	const private = "O:BAD:P(A;;FA;;;BA)(A;;FA;;;SY)"
	folder := fakeObject{kind: Dir, sddl: "O:SYD:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)"}
	for _, tc := range []struct {
		name string
		key  fakeObject
		who  string // "" passes; else the refusal names it
	}{
		{"the administrators' alone", fakeObject{kind: File, sddl: private}, ""},
		{"the local Administrator's and the domain's admins' (LA, DA)", fakeObject{kind: File, sddl: "O:LAD:P(A;;FA;;;DA)(A;;FA;;;SY)"}, ""},
		{"the plugin's own account may read", fakeObject{kind: File, sddl: private + "(A;;FR;;;" + selfSID + ")"}, ""},
		{"Users may read", fakeObject{kind: File, sddl: private + "(A;;0x1200a9;;;BU)"}, `BUILTIN\Users`},
		{"Authenticated Users GENERIC_READ", fakeObject{kind: File, sddl: private + "(A;;GR;;;AU)"}, "Authenticated Users"},
		{"a user reads attributes alone", fakeObject{kind: File, sddl: private + "(A;;0x80;;;BU)"}, ""},
		{"inherit-only read", fakeObject{kind: File, sddl: private + "(A;OIIO;FR;;;BU)"}, ""},
		{"a user owns it", fakeObject{kind: File, sddl: "O:S-1-5-21-1-2-3-1001D:P(A;;FA;;;SY)"}, "its owner"},
		{"a NULL DACL", fakeObject{kind: File, sddl: "O:BAD:NO_ACCESS_CONTROL"}, "Everyone"},
		{"root's, 0600", fakeObject{kind: File, mode: 0o600}, ""},
		{"root's, 0640 group root", fakeObject{kind: File, mode: 0o640}, ""},
		{"group 1001 may read", fakeObject{kind: File, gid: 1001, mode: 0o640}, "(gid 1001, mode 0640)"},
		{"every user may read", fakeObject{kind: File, mode: 0o644}, "every user (mode 0644)"},
		{"another user owns it", fakeObject{kind: File, uid: 1001, mode: 0o600}, "its owner"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fakeFS{at(""): folder, at("keys"): folder, at("keys/admin.key"): tc.key}
			if tc.key.sddl == "" {
				f = fakeFS{at(""): {kind: Dir, mode: os.ModeDir | 0o755}, at("keys"): {kind: Dir, mode: os.ModeDir | 0o700}, at("keys/admin.key"): tc.key}
			}
			err := Checker{FS: f}.CheckSecret(at("keys/admin.key"))
			var re *ReadableError
			var we *WritableError
			switch {
			case tc.who == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.who != "" && !(errors.As(err, &re) && re.Path == at("keys/admin.key") || errors.As(err, &we)):
				t.Errorf("%v, want refused naming %s", err, tc.who)
			case tc.who != "" && !strings.Contains(err.Error(), tc.who):
				t.Errorf("%v, want it to name %s", err, tc.who)
			}
		})
	}
	f := fakeFS{at(""): folder, at("keys"): folder}
	if err := (Checker{FS: f}).CheckSecret(at("keys")); err == nil {
		t.Error("a folder taken for a secret")
	}
	f[at("keys/admin.key")] = fakeObject{kind: File, sddl: private}
	f[at("keys")] = fakeObject{kind: Dir, sddl: "O:SYD:P(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICI;0x1301bf;;;BU)"}
	var we *WritableError
	if err := (Checker{FS: f}).CheckSecret(at("keys/admin.key")); !errors.As(err, &we) || we.Path != at("keys") {
		t.Errorf("a secret in a folder Users may change: %v, want Check's refusal naming the folder", err)
	}
}
