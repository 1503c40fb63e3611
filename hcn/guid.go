package hcn

import (
	"strings"

	"github.com/google/uuid"
)

// ZeroGUID is what HNS may report as the namespace of an endpoint that is
// attached to none.
const ZeroGUID = "00000000-0000-0000-0000-000000000000"

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
