package nodefs

import (
	"slices"
	"strings"
	"testing"
)

// Security descriptors of the folders a Windows node gives the plugin,
// as SDDL. C:\'s default DACL on Windows Server gives BUILTIN\Users read,
// "create folders" on C:\ and below ((CI)(AD): LC, 0x4) and "create
// files" below it ((CI)(IO)(WD): DC, 0x2), CREATOR OWNER full control on
// what it creates (docs/real-node.md). A folder made under it with a
// plain MkdirAll by a SYSTEM process (kubelet's root, pods and volume
// folders: setupDataDirs, the volume plugins) inherits the same ACEs at
// every depth: the CI ACEs apply to each folder and pass on; a file made
// in one inherits only the OI ones.
const (
	trustedInstaller = "S-1-5-80-956008885-3418522649-1831038044-1853292631-2271478464"
	sddlDriveRoot    = "O:" + trustedInstaller + "G:" + trustedInstaller +
		"D:PAI(A;OICIIO;GA;;;CO)(A;OICI;FA;;;SY)(A;OICI;FA;;;BA)(A;OICI;0x1200a9;;;BU)(A;CI;LC;;;BU)(A;CIIO;DC;;;BU)"
	sddlKubeletFolder = "O:SYG:SYD:AI(A;ID;FA;;;SY)(A;OICIIOID;GA;;;CO)(A;OICIID;FA;;;SY)(A;OICIID;FA;;;BA)" +
		"(A;OICIID;0x1200a9;;;BU)(A;CIID;LC;;;BU)(A;CIID;DC;;;BU)"
	sddlKubeletFile = "O:SYG:SYD:AI(A;ID;FA;;;SY)(A;ID;FA;;;BA)(A;ID;0x1200a9;;;BU)"
	sddlContainerd  = "O:BAG:SYD:P(A;OICI;GA;;;BA)(A;OICI;GA;;;SY)" // pkg/sys SddlAdministratorsLocalSystem
	sddlPrivate     = "O:BAG:SY" + PrivateSDDL
	sddlProgramData = "O:SYG:SYD:AI(A;OICIID;FA;;;SY)(A;OICIID;FA;;;BA)(A;OICIIOID;GA;;;CO)(A;OICIID;0x1200a9;;;BU)(A;CIID;DCLCRPCR;;;BU)"
	selfSID         = "S-1-5-21-1-2-3-500"
)

// Who may do what to one object, read from its SDDL: the node's folders
// give Users the right to add (never a write of what is there), hostile
// ones are named with what they allow.
func TestGrantsFromSDDL(t *testing.T) {
	for _, tc := range []struct {
		name, sddl string
		kind       Kind
		want       []string // "who: rights" fragments, one per principal; none: nobody else may do anything
	}{
		{"C:\\ itself: Users may add", sddlDriveRoot, Dir, []string{`BUILTIN\Users (S-1-5-32-545): add files to it`}},
		{"a kubelet folder: Users may add", sddlKubeletFolder, Dir, []string{`BUILTIN\Users (S-1-5-32-545): add files to it`}},
		{"a kubelet file: nobody", sddlKubeletFile, File, nil},
		{"a link kubelet made: nobody", sddlKubeletFile, Link, nil},
		{"containerd's folder: nobody", sddlContainerd, Dir, nil},
		{"what MkdirPrivate makes: nobody", sddlPrivate, Dir, nil},
		{"a ProgramData folder: Users may add", sddlProgramData, Dir, []string{`BUILTIN\Users (S-1-5-32-545): add files to it`}},
		{"read for everyone", "O:BAD:(A;;FR;;;WD)(A;;FA;;;BA)(A;;FA;;;SY)", File, nil},
		{"read and execute is no write", "O:SYD:(A;OICI;0x1200a9;;;BU)(A;OICI;FA;;;BA)", Dir, nil},
		{"modify for Users, a file", "O:BAD:(A;;0x1301bf;;;BU)(A;;FA;;;BA)", File, []string{`BUILTIN\Users (S-1-5-32-545): write it, delete or rename it`}},
		{"modify for Users, a folder", "O:BAD:(A;OICI;0x1301bf;;;BU)", Dir, []string{`BUILTIN\Users (S-1-5-32-545): delete or rename it, add files to it`}},
		{"delete child for Users", "O:BAD:(A;;DT;;;BU)", Dir, []string{"BUILTIN\\Users (S-1-5-32-545): delete or rename what it holds"}},
		{"generic write on a folder only adds", "O:BAD:(A;;GW;;;AU)", Dir, []string{"Authenticated Users (S-1-5-11): add files to it"}},
		{"generic write on a file writes", "O:BAD:(A;;GW;;;AU)", File, []string{"Authenticated Users (S-1-5-11): write it"}},
		{"write attributes on a file", "O:BAD:(A;;CR;;;AU)", File, []string{"Authenticated Users (S-1-5-11): write it"}},
		{"write DAC for Authenticated Users", "O:BAD:(A;;WD;;;AU)", Dir, []string{"Authenticated Users (S-1-5-11): change its permissions"}},
		{"write owner", "O:BAD:(A;;WO;;;IU)", File, []string{"INTERACTIVE (S-1-5-4): change its permissions"}},
		{"Everyone full, a folder", "O:BAD:P(A;;FA;;;WD)", Dir, []string{"Everyone (S-1-1-0): delete or rename it, change its permissions, add files to it, delete or rename what it holds"}},
		{"no DACL at all", "O:BAG:SY", File, []string{"Everyone (it has no DACL): write it, delete or rename it, change its permissions"}},
		{"a NULL DACL", "O:BAG:SYD:NO_ACCESS_CONTROL", File, []string{"Everyone (a NULL DACL, D:NO_ACCESS_CONTROL): write it"}},
		{"a NULL DACL with flags", "O:BAD:PNO_ACCESS_CONTROL", Dir, []string{"Everyone (a NULL DACL"}},
		{"an empty DACL", "O:BAD:P", File, nil},
		{"a user's own folder", "O:S-1-5-21-1-2-3-1001G:S-1-5-21-1-2-3-513" + sddlProgramData[len("O:SYG:SY"):], Dir,
			[]string{"S-1-5-21-1-2-3-1001, its owner: change its permissions", `BUILTIN\Users`}},
		{"the plugin's own account owns it", "O:" + selfSID + "D:(A;;FA;;;" + selfSID + ")", File, nil},
		{"the built-in Administrator owns it (LA, issue 53)", "O:LAD:P(A;;FA;;;LA)(A;;FA;;;SY)", File, nil},
		{"Domain Admins own it (DA, issue 53)", "O:DAG:DUD:AI(A;OICIID;FA;;;DA)(A;OICIID;FA;;;SY)", Dir, nil},
		{"the local guest owns it (LG)", "O:LGD:P(A;;FA;;;SY)", File, []string{"LG, its owner: change its permissions"}},
		{"TrustedInstaller", "O:" + trustedInstaller + "D:P(A;;FA;;;" + trustedInstaller + ")", File, nil},
		{"inherit-only write does not apply here", "O:BAD:P(A;OICIIO;GA;;;BU)(A;;FA;;;SY)", Dir, nil},
		{"CREATOR OWNER is a placeholder", "O:BAD:P(A;;FA;;;CO)", File, nil},
		{"a deny does not clear it", "O:BAD:(D;;FA;;;BU)(A;;FA;;;BU)", File, []string{`BUILTIN\Users`}},
		{"OWNER RIGHTS with a trusted owner", "O:BAD:(A;;FA;;;OW)", File, nil},
		{"a conditional allow counts", "O:BAD:(XA;;FA;;;WD;(Member_of {SID(BU)}))", File, []string{"Everyone"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Grants(tc.sddl, selfSID, tc.kind)
			if err != nil {
				t.Fatal(err)
			}
			var says []string
			for _, g := range got {
				says = append(says, g.Who+": "+g.Rights.String())
			}
			if len(says) != len(tc.want) {
				t.Fatalf("Grants(%s) = %q, want %d: %q", tc.sddl, says, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(says[i], w) {
					t.Errorf("grant %d: %q, want it to say %q", i, says[i], w)
				}
			}
		})
	}
	for _, bad := range []string{"X:BA", "O:BAD:(A;;QQ;;;BU)", "O:BAD:(A;;FA)"} {
		if got, err := Grants(bad, "", File); err == nil {
			t.Errorf("Grants(%q) = %q, want an error", bad, got)
		}
	}
}

// Writers (a file, or the admin pipe) names who may change it.
func TestWritersNameWhoMayChangeAFile(t *testing.T) {
	if got, _ := Writers("O:BAD:(A;;FA;;;BU)", ""); !slices.Equal(got, []string{`BUILTIN\Users (S-1-5-32-545) (may write it, delete or rename it, change its permissions)`}) {
		t.Errorf("Users full: %q", got)
	}
	if got, _ := Writers("O:SYD:NO_ACCESS_CONTROL", ""); len(got) != 1 || !strings.Contains(got[0], "NULL DACL") {
		t.Errorf("a NULL DACL: %q, want Everyone", got)
	}
	if got, _ := Writers(sddlKubeletFile, ""); len(got) != 0 {
		t.Errorf("kubelet's file: %q, want nobody", got)
	}
}
