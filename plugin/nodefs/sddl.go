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
// TrustedInstaller (the owner of Windows' own files).
var trustedSIDs = []string{"S-1-5-18", "S-1-5-32-544", "S-1-5-80-956008885-3418522649-1831038044-1853292631-2271478464"}

// Access rights as SDDL writes them (files and folders use the directory
// service names for their specific rights).
var rightAbbrev = map[string]uint32{
	"GA": 0x10000000, "GR": 0x80000000, "GW": 0x40000000, "GX": 0x20000000,
	"RC": 0x20000, "SD": 0x10000, "WD": 0x40000, "WO": 0x80000,
	"CC": 0x1, "DC": 0x2, "LC": 0x4, "SW": 0x8, "RP": 0x10, "WP": 0x20, "DT": 0x40, "LO": 0x80, "CR": 0x100,
	"FA": 0x1f01ff, "FR": 0x120089, "FW": 0x120116, "FX": 0x1200a0,
	"KA": 0xf003f, "KR": 0x20019, "KW": 0x20006, "KX": 0x20019,
}

// writeMask is every right that lets a principal change a file or a
// folder's content, or its security: write or append data (add a file or
// a folder), delete it or a child, change its DACL or owner, or generic
// write or all.
const writeMask = 0x2 | 0x4 | 0x40 | 0x10000 | 0x40000 | 0x80000 | 0x10000000 | 0x40000000

// Writers reads an object's security descriptor (SDDL) and returns who,
// besides SYSTEM, Administrators, TrustedInstaller and self (the plugin's
// own account's SID, "" for none), may change it: an untrusted owner (it
// may rewrite the DACL), and every principal an allow ACE that applies to
// the object itself grants a writing right. Deny ACEs are not weighed (the
// answer errs towards refusing); a descriptor without a DACL lets everyone
// change it.
func Writers(sddl, self string) ([]string, error) {
	trusted := func(sid string) bool { return slices.Contains(trustedSIDs, sid) || (self != "" && sid == self) }
	var who []string
	add := func(s string) {
		if !slices.Contains(who, s) {
			who = append(who, s)
		}
	}
	owner, dacl, hasDACL, err := parseSDDL(sddl)
	if err != nil {
		return nil, err
	}
	if owner != "" && !trusted(owner) {
		add(name(owner) + " (its owner, who may change its permissions)")
	}
	if !hasDACL {
		add("Everyone (it has no DACL)")
		return who, nil
	}
	for _, a := range dacl {
		if !a.allow || a.inheritOnly || a.mask&writeMask == 0 {
			continue
		}
		if a.sid == "S-1-3-4" && (owner == "" || trusted(owner)) { // OWNER RIGHTS: the owner, judged above
			continue
		}
		if !trusted(a.sid) {
			add(name(a.sid) + " (may write)")
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

// parseSDDL reads the owner and the DACL of a security descriptor string.
func parseSDDL(s string) (owner string, dacl []ace, hasDACL bool, err error) {
	s = strings.TrimSpace(s)
	for len(s) > 0 {
		if len(s) < 2 || s[1] != ':' || !strings.ContainsRune("OGDS", rune(s[0])) {
			return "", nil, false, fmt.Errorf("SDDL %q: want O:, G:, D: or S: at %q", s, s)
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
			if dacl, err = parseACL(part); err != nil {
				return "", nil, false, err
			}
		}
	}
	return owner, dacl, hasDACL, nil
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
