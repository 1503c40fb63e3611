package nodefs

import (
	"slices"
	"strings"
	"testing"
)

// The Windows decision, on security descriptors as SDDL: who besides
// SYSTEM, Administrators, TrustedInstaller and the plugin's own account
// may change a file or folder the plugin trusts. The ProgramData rows are
// its default ACL (BUILTIN\Users may add files and folders, inherited),
// which a folder made there without a DACL of its own inherits.
func TestWritersFromSDDL(t *testing.T) {
	const programDataInherited = "(A;OICIID;FA;;;SY)(A;OICIID;FA;;;BA)(A;OICIIOID;GA;;;CO)(A;OICIID;0x1200a9;;;BU)(A;CIID;DCLCRPCR;;;BU)"
	const self = "S-1-5-21-1-2-3-500"
	for _, tc := range []struct {
		name, sddl string
		want       []string // fragments, one per principal named; none: nobody else
	}{
		{"what MkdirPrivate makes", "O:BAG:SY" + PrivateSDDL, nil},
		{"containerd's own folders", "O:SYG:SYD:P(A;OICI;GA;;;BA)(A;OICI;GA;;;SY)", nil},
		{"made by SYSTEM under ProgramData, inherited", "O:SYG:SYD:AI" + programDataInherited, []string{`BUILTIN\Users (S-1-5-32-545) (may write)`}},
		{"made first by a user under ProgramData", "O:S-1-5-21-1-2-3-1001G:S-1-5-21-1-2-3-513D:AI" + programDataInherited,
			[]string{"S-1-5-21-1-2-3-1001 (its owner", `BUILTIN\Users`}},
		{"read for everyone", "O:BAD:(A;;FR;;;WD)(A;;FA;;;BA)(A;;FA;;;SY)", nil},
		{"modify for Users", "O:BAD:(A;;0x1301bf;;;BU)(A;;FA;;;BA)", []string{`BUILTIN\Users`}},
		{"write DAC for Authenticated Users", "O:BAD:(A;;WD;;;AU)", []string{"Authenticated Users"}},
		{"Everyone full", "O:BAD:P(A;;FA;;;WD)", []string{"Everyone (S-1-1-0)"}},
		{"no DACL at all", "O:BAG:SY", []string{"Everyone (it has no DACL)"}},
		{"an empty DACL", "O:BAD:P", nil},
		{"the plugin's own account owns it", "O:" + self + "D:(A;;FA;;;" + self + ")", nil},
		{"TrustedInstaller", "O:S-1-5-80-956008885-3418522649-1831038044-1853292631-2271478464D:P(A;;FA;;;S-1-5-80-956008885-3418522649-1831038044-1853292631-2271478464)", nil},
		{"inherit-only write does not apply here", "O:BAD:P(A;OICIIO;GA;;;BU)(A;;FA;;;SY)", nil},
		{"a deny does not clear it", "O:BAD:(D;;FA;;;BU)(A;;FA;;;BU)", []string{`BUILTIN\Users`}},
		{"OWNER RIGHTS with a trusted owner", "O:BAD:(A;;FA;;;OW)", nil},
		{"read and execute is no write", "O:SYD:(A;OICI;0x1200a9;;;BU)(A;OICI;FA;;;BA)", nil},
		{"a conditional allow counts", "O:BAD:(XA;;FA;;;WD;(Member_of {SID(BU)}))", []string{"Everyone"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Writers(tc.sddl, self)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("Writers(%s) = %q, want %d named: %q", tc.sddl, got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("principal %d: %q, want it to say %q", i, got[i], w)
				}
			}
		})
	}
	for _, bad := range []string{"X:BA", "O:BAD:(A;;QQ;;;BU)", "O:BAD:(A;;FA)"} {
		if got, err := Writers(bad, ""); err == nil {
			t.Errorf("Writers(%q) = %q, want an error", bad, got)
		}
	}
	if got, _ := Writers("O:BAD:(A;;FA;;;BU)", ""); !slices.Equal(got, []string{`BUILTIN\Users (S-1-5-32-545) (may write)`}) {
		t.Errorf("without a self: %q", got)
	}
}
