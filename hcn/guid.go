package hcn

import (
	"strings"

	"github.com/google/uuid"
)

// ZeroGUID is what HNS may report as the namespace of an endpoint that is
// attached to none.
const ZeroGUID = "00000000-0000-0000-0000-000000000000"

// GUID is the ID of an HCN namespace in its one canonical form (see
// CanonicalGUID). Namespace GUIDs come from two places that may spell them
// differently, the OCI spec and HNS: ParseGUID at the boundary makes every
// comparison, map key and log line use the same form, and the type keeps a
// raw string from being compared with one.
type GUID string

// ParseGUID reads a namespace GUID in any spelling; "" and the zero GUID
// are "" (none).
func ParseGUID(s string) GUID { return GUID(CanonicalGUID(s)) }

// String is the GUID as HNS writes it.
func (g GUID) String() string { return string(g) }

// CanonicalGUID is the one form in which GUIDs (namespace and endpoint IDs)
// are compared, used as keys and logged: upper case, without braces, as HNS
// writes them. HNS, the OCI spec and operators may spell one GUID
// differently ({...}, lower case); every boundary where a GUID comes in
// (the spec, HNS's answers) passes it through here. A string that is not a
// GUID is returned trimmed, unchanged otherwise; the zero GUID, which means
// "none", becomes "".
func CanonicalGUID(s string) string {
	s = strings.TrimSpace(s)
	u, err := uuid.Parse(s)
	if err != nil {
		return s
	}
	c := strings.ToUpper(u.String())
	if c == ZeroGUID {
		return ""
	}
	return c
}
