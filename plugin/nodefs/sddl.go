package nodefs

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Well-known SIDs, as SDDL abbreviates them.
var sidAbbrev = map[string]string{
	"SY": "S-1-5-18", "BA": "S-1-5-32-544", "BU": "S-1-5-32-545", "BG": "S-1-5-32-546", "PU": "S-1-5-32-547",
	"AU": "S-1-5-11", "WD": "S-1-1-0", "IU": "S-1-5-4", "NU": "S-1-5-2", "AN": "S-1-5-7", "LS": "S-1-5-19",
	"NS": "S-1-5-20", "CO": "S-1-3-0", "CG": "S-1-3-1", "OW": "S-1-3-4", "SU": "S-1-5-6", "BO": "S-1-5-32-551",
	"SO": "S-1-5-32-549", "AO": "S-1-5-32-548", "RD": "S-1-5-32-555", "NO": "S-1-5-32-556", "RU": "S-1-5-32-554",
	"AC": "S-1-15-2-1", "RC": "S-1-5-12", "WR": "S-1-5-33", "PS": "S-1-5-10", "LW": "S-1-16-4096", "ME": "S-1-16-8192",
	"HI": "S-1-16-12288", "SI": "S-1-16-16384",
}

// sidNames name the SIDs an operator meets in a refusal.
var sidNames = map[string]string{
	"S-1-5-32-545": `BUILTIN\Users`, "S-1-5-11": `NT AUTHORITY\Authenticated Users`, "S-1-1-0": "Everyone",
	"S-1-5-4": `NT AUTHORITY\INTERACTIVE`, "S-1-5-32-546": `BUILTIN\Guests`, "S-1-5-7": "ANONYMOUS LOGON",
	"S-1-5-32-547": `BUILTIN\Power Users`, "S-1-15-2-1": "ALL APPLICATION PACKAGES", "S-1-5-19": `NT AUTHORITY\LOCAL SERVICE`,
	"S-1-5-20": `NT AUTHORITY\NETWORK SERVICE`, "S-1-3-4": "OWNER RIGHTS",
}

// trustedSIDs may change what the plugin trusts: SYSTEM, Administrators and
// TrustedInstaller (the owner of Windows' own files), and the two
// administrators SDDL writes by their machine- or domain-relative
// abbreviation (ConvertSecurityDescriptorToStringSecurityDescriptor): LA,
// the node's built-in Administrator (RID 500), and DA, its domain's Domain
// Admins (RID 512), which joining a domain puts in the node's
// Administrators.
var trustedSIDs = []string{"S-1-5-18", "S-1-5-32-544", "S-1-5-80-956008885-3418522649-1831038044-1853292631-2271478464", "LA", "DA"}

// isTrusted: sid is a trusted principal's, or self's (the plugin's own
// account, "" for none).
func isTrusted(sid, self string) bool {
	return slices.Contains(trustedSIDs, sid) || (self != "" && sid == self)
}

// Access rights as SDDL writes them (files and folders use the directory
// service names for their specific rights).
var rightAbbrev = map[string]uint32{
	"GA": 0x10000000, "GR": 0x80000000, "GW": 0x40000000, "GX": 0x20000000,
	"RC": 0x20000, "SD": 0x10000, "WD": 0x40000, "WO": 0x80000,
	"CC": 0x1, "DC": 0x2, "LC": 0x4, "SW": 0x8, "RP": 0x10, "WP": 0x20, "DT": 0x40, "LO": 0x80, "CR": 0x100,
	"FA": 0x1f01ff, "FR": 0x120089, "FW": 0x120116, "FX": 0x1200a0,
	"KA": 0xf003f, "KR": 0x20019, "KW": 0x20006, "KX": 0x20019,
}

// Access rights of files and folders (winnt.h), as the check weighs them.
const (
	fileWriteData       = 0x2   // a folder: add a file
	fileAppendData      = 0x4   // a folder: add a subfolder
	fileDeleteChild     = 0x40  // a folder: delete or rename what it holds
	fileWriteAttributes = 0x100 // attributes (read-only, reparse): content for a file
	accessDelete        = 0x10000
	writeDAC            = 0x40000
	writeOwner          = 0x80000
	genericAll          = 0x10000000
	genericWrite        = 0x40000000 // FILE_GENERIC_WRITE: write data, append, attributes
)

// rightsOf maps an access mask on an object of kind k onto the rights the
// check weighs. Adding files and folders to a folder is RightAdd, never
// RightWrite: it changes no entry the folder holds.
func rightsOf(mask uint32, k Kind) Rights {
	var r Rights
	if mask&genericAll != 0 {
		mask |= 0x1f01ff // FILE_ALL_ACCESS
	}
	if mask&genericWrite != 0 {
		mask |= fileWriteData | fileAppendData | fileWriteAttributes
	}
	if mask&accessDelete != 0 {
		r |= RightDelete
	}
	if mask&(writeDAC|writeOwner) != 0 {
		r |= RightPerms
	}
	switch {
	case k == Dir:
		if mask&(fileWriteData|fileAppendData) != 0 {
			r |= RightAdd
		}
		if mask&fileDeleteChild != 0 {
			r |= RightDeleteChild
		}
	case k == Link:
		// where a link points: a reparse point is set or deleted with
		// FILE_WRITE_DATA or FILE_WRITE_ATTRIBUTES on the link itself
		// (MS-FSA 2.1.5.10.37 FSCTL_SET_REPARSE_POINT, 2.1.5.10.3
		// FSCTL_DELETE_REPARSE_POINT), a directory link's as a file
		// link's: on a directory link FILE_WRITE_DATA is the bit its
		// folder's "add files" ACE (DC) gives it by inheritance, and
		// FILE_APPEND_DATA ("add folders") re-points nothing
		if mask&(fileWriteData|fileWriteAttributes) != 0 {
			r |= RightWrite
		}
	case mask&(fileWriteData|fileAppendData|fileWriteAttributes) != 0:
		r |= RightWrite // a file's content
	}
	return r
}

// Grants reads an object's security descriptor (SDDL) and returns who,
// besides SYSTEM, Administrators, TrustedInstaller and self (the plugin's
// own account's SID, "" for none), may do what to it, an object of kind
// k: an untrusted owner may change its permissions; every allow ACE that
// applies to the object itself (not inherit-only) grants its rights. Deny
// ACEs are not weighed (the answer errs towards refusing). A descriptor
// without a DACL, or with a NULL DACL (D:NO_ACCESS_CONTROL), lets everyone
// do everything; an empty DACL lets nobody do anything.
func Grants(sddl, self string, k Kind) ([]Grant, error) {
	trusted := func(sid string) bool { return isTrusted(sid, self) }
	var out []Grant
	add := func(who string, r Rights) {
		for i := range out {
			if out[i].Who == who {
				out[i].Rights |= r
				return
			}
		}
		out = append(out, Grant{Who: who, Rights: r})
	}
	owner, dacl, hasDACL, null, err := parseSDDL(sddl)
	if err != nil {
		return nil, err
	}
	if owner != "" && !trusted(owner) {
		add(name(owner)+", its owner", RightPerms)
	}
	if !hasDACL || null {
		why := "it has no DACL"
		if null {
			why = "a NULL DACL, D:NO_ACCESS_CONTROL"
		}
		add("Everyone ("+why+")", rightsOf(genericAll, k))
		return out, nil
	}
	for _, a := range dacl {
		if !a.allow || a.inheritOnly {
			continue
		}
		switch {
		case a.sid == "S-1-3-4" && (owner == "" || trusted(owner)): // OWNER RIGHTS: the owner, judged above
			continue
		case a.sid == "S-1-3-0" || a.sid == "S-1-3-1": // CREATOR OWNER/GROUP: placeholders for what is created
			continue
		}
		if r := rightsOf(a.mask, k); r != 0 && !trusted(a.sid) {
			add(name(a.sid), r)
		}
	}
	return out, nil
}

// Writers says who, besides the trusted principals and self, may change a
// file (an object read as a whole: a file, a pipe) whose security
// descriptor is sddl: write it, delete or rename it, or change its
// permissions. Each is named with what it may do.
func Writers(sddl, self string) ([]string, error) {
	gs, err := Grants(sddl, self, File)
	if err != nil {
		return nil, err
	}
	var who []string
	for _, g := range gs {
		if r := g.Rights & theFile; r != 0 {
			who = append(who, g.Who+" (may "+r.String()+")")
		}
	}
	return who, nil
}

// Rights to read a file's content (winnt.h).
const (
	fileReadData = 0x1
	genericRead  = 0x80000000
)

// Readers says who, besides the trusted principals and self, may read a
// file (a secret: the admin key) whose security descriptor is sddl: an
// owner who is not trusted (it may grant itself anything), everyone where
// the DACL is missing or NULL, and every allow ACE that applies to the
// file and gives FILE_READ_DATA (or GENERIC_READ, GENERIC_ALL).
func Readers(sddl, self string) ([]string, error) {
	owner, dacl, hasDACL, null, err := parseSDDL(sddl)
	if err != nil {
		return nil, err
	}
	var who []string
	if owner != "" && !isTrusted(owner, self) {
		who = append(who, name(owner)+", its owner")
	}
	if !hasDACL || null {
		return append(who, "Everyone (no DACL, or a NULL one)"), nil
	}
	for _, a := range dacl {
		switch {
		case !a.allow || a.inheritOnly || a.mask&(fileReadData|genericRead|genericAll) == 0 || isTrusted(a.sid, self):
		case a.sid == "S-1-3-0" || a.sid == "S-1-3-1": // placeholders for what is created
		case a.sid == "S-1-3-4" && (owner == "" || isTrusted(owner, self)): // OWNER RIGHTS of a trusted owner
		default:
			if n := name(a.sid); !slices.Contains(who, n) {
				who = append(who, n)
			}
		}
	}
	return who, nil
}

func name(sid string) string {
	if n, ok := sidNames[sid]; ok {
		return n + " (" + sid + ")"
	}
	return sid
}

type ace struct {
	allow, inheritOnly bool
	mask               uint32
	sid                string
}

// parseSDDL reads the owner and the DACL of a security descriptor string;
// null: the DACL is NULL (D:NO_ACCESS_CONTROL, SDDL_NULL_ACL), which
// grants everyone everything.
func parseSDDL(s string) (owner string, dacl []ace, hasDACL, null bool, err error) {
	s = strings.TrimSpace(s)
	for len(s) > 0 {
		if len(s) < 2 || s[1] != ':' || !strings.ContainsRune("OGDS", rune(s[0])) {
			return "", nil, false, false, fmt.Errorf("SDDL %q: want O:, G:, D: or S: at %q", s, s)
		}
		tag := s[0]
		rest := s[2:]
		end := len(rest)
		for _, next := range []string{"O:", "G:", "D:", "S:"} {
			if i := strings.Index(rest, next); i >= 0 && i < end && !insideACE(rest, i) {
				end = i
			}
		}
		part := rest[:end]
		s = rest[end:]
		switch tag {
		case 'O':
			owner = sid(part)
		case 'D':
			hasDACL = true
			flags, _, _ := strings.Cut(part, "(")
			null = strings.Contains(flags, "NO_ACCESS_CONTROL")
			if dacl, err = parseACL(part); err != nil {
				return "", nil, false, false, err
			}
		}
	}
	return owner, dacl, hasDACL, null, nil
}

// insideACE reports whether position i of s is inside parentheses.
func insideACE(s string, i int) bool {
	return strings.Count(s[:i], "(") > strings.Count(s[:i], ")")
}

func sid(s string) string {
	if full, ok := sidAbbrev[s]; ok {
		return full
	}
	return strings.ToUpper(s)
}

// parseACL reads "flags(ace)(ace)...".
func parseACL(s string) ([]ace, error) {
	var out []ace
	i := strings.IndexByte(s, '(')
	if i < 0 {
		return nil, nil // flags only (P, AI): an empty DACL
	}
	for _, body := range strings.Split(strings.TrimSuffix(s[i+1:], ")"), ")(") {
		f := strings.Split(body, ";")
		if len(f) < 6 {
			return nil, fmt.Errorf("ACE %q: want type;flags;rights;object;inherited object;SID", body)
		}
		var a ace
		switch f[0] {
		case "A", "OA", "XA", "ZA":
			a.allow = true
		}
		a.inheritOnly = strings.Contains(f[1], "IO")
		m, err := rights(f[2])
		if err != nil {
			return nil, fmt.Errorf("ACE %q: %w", body, err)
		}
		a.mask, a.sid = m, sid(f[5])
		out = append(out, a)
	}
	return out, nil
}

func rights(s string) (uint32, error) {
	if strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X") {
		n, err := strconv.ParseUint(s[2:], 16, 32)
		return uint32(n), err
	}
	var m uint32
	for len(s) >= 2 {
		r, ok := rightAbbrev[s[:2]]
		if !ok {
			return 0, fmt.Errorf("access right %q", s[:2])
		}
		m |= r
		s = s[2:]
	}
	if s != "" {
		return 0, fmt.Errorf("access rights end in %q", s)
	}
	return m, nil
}
