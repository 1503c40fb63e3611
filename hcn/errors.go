package hcn

import (
	"errors"
	"fmt"
	"slices"
)

// Typed errors every Service implementation maps HNS failures onto. Test with
// errors.Is. What each means, what HNS answers for it and whether a retry
// can help is one row of the table below.
var (
	// ErrNotFound: the network, endpoint or namespace does not exist
	// (hcsshim's *NotFoundError types and HNS's raw ERROR_NOT_FOUND alike).
	ErrNotFound = errors.New("not found")
	// ErrPortInUse: something already holds the host port
	// (HCN_E_PORT_ALREADY_EXISTS): another endpoint, a host process, or a
	// port HNS itself kept after a delete.
	ErrPortInUse = errors.New("host port already in use")
	// ErrAlreadyAttached: the endpoint is already in a namespace
	// (HCN_E_ENDPOINT_ALREADY_ATTACHED).
	ErrAlreadyAttached = errors.New("endpoint already attached to a namespace")
	// ErrInUse: the object still has references, e.g. an endpoint that is
	// still attached cannot be deleted (HCN_E_ENTITY_HAS_REFERENCES).
	ErrInUse = errors.New("object has references")
	// ErrInvalid: HNS rejected the request as malformed (HCN_E_INVALID_*).
	ErrInvalid = errors.New("invalid request")
	// ErrMappingNotSupported: the network takes no port mappings
	// (HCN_E_MAPPING_NOT_SUPPORTED); it wraps ErrInvalid (final).
	ErrMappingNotSupported = fmt.Errorf("%w: port mapping is not supported on the network", ErrInvalid)
	// ErrExists: HNS refused to create an object that exists already
	// (ERROR_OBJECT_ALREADY_EXISTS), e.g. a second NAT network where HNS
	// takes one only.
	ErrExists = errors.New("object already exists")
	// ErrAttachFailed: HNS could not attach the endpoint to the namespace,
	// whose network compartment is not there (going away, or not made yet:
	// a compartment exists once a container runs in it).
	ErrAttachFailed = errors.New("the namespace's network compartment is not there")
	// ErrUnavailable: the backend cannot be reached (HNS restarting, its
	// RPC endpoint gone) or does not exist here.
	ErrUnavailable = errors.New("hcn backend unavailable")
	// ErrNotInstalled: HNS's DLLs (computenetwork.dll, vmcompute.dll) are
	// not on this host: the Containers feature is not installed.
	ErrNotInstalled = errors.New("HNS is not installed (the Windows Containers feature)")
	// ErrTimeout: the plugin gave up waiting for HNS (the call may still
	// take effect later, as HNS finishes what it started).
	ErrTimeout = errors.New("gave up waiting for HNS")
	// ErrChanged: HNS changed while it was being read (an endpoint deleted
	// during a listing, which hcsshim reports as not found): reading again
	// helps.
	ErrChanged = errors.New("HNS changed while it was being read")
)

// Code is an HNS failure code as hcsshim keeps it: an HRESULT
// (0x803B0013), or the Win32 code of a Win32-facility one (hcsshim keeps
// 0x80070490 as 0x490).
type Code uint32

// Call says in which calls a code has its meaning: some of HNS's answers
// mean one thing creating an endpoint with host ports, another creating a
// network.
type Call int

// Calls a code can be limited to.
const (
	AnyCall         Call = iota
	ClaimingPorts        // creating an endpoint with PortMapping policies
	CreatingNetwork      // creating a network
)

// Retry says whether work that failed so is worth trying again.
type Retry int

// Retry verdicts.
const (
	RetryUnknown Retry = iota // an error nobody classified: a few tries (the caller's bound)
	RetryNever                // final: the same request fails the same way
	RetryFew                  // may pass soon: a few tries, then the next resync
	RetryAlways               // passes by itself: for as long as the work matters
)

// Answer is one of HNS's failure codes for a kind, with where it was seen.
type Answer struct {
	Code     Code
	Name     string
	Call     Call
	Evidence string
}

// Kind is one row of the table: an HNS failure's meaning.
type Kind struct {
	Err   error
	Name  string // on the simulator's wire and in its faults
	Retry Retry
	// Answered: HNS answered the question (what was asked for is not
	// there), it did not fail: a call, not a failed call, in the metrics
	Answered bool
	Answers  []Answer // what HNS answers for it (none: the plugin's own, or hcsshim's)
}

// kinds is the table of HNS errors, the one place an HNS error is given a
// meaning: the Windows adapter maps HNS's answers with it (FromCode), the
// emulator answers with it (CodeOf), the simulator names its faults and
// wire errors with it (Named, NameOf), and Permanent and Retryable read
// it. A new HNS error is a row here, or an Answer in a row. First match
// wins (ErrChanged wraps a not-found, ErrMappingNotSupported wraps
// ErrInvalid).
var kinds = []Kind{
	// the plugin's own verdicts first: they wrap what HNS answered (a
	// listing that raced a delete wraps its not-found)
	{ErrChanged, "changed", RetryAlways, false, nil},
	{ErrTimeout, "timeout", RetryAlways, false, nil},
	{ErrNotFound, "not-found", RetryNever, true, []Answer{
		{0x490, "ERROR_NOT_FOUND", AnyCall, "hcsshim hcn/hcnerrors.go IsElementNotFoundError: open, modify, delete of a missing object"},
		{0x803B0001, "HCN_E_NETWORK_NOT_FOUND", AnyCall, "x/sys/windows zerrors"},
		{0x803B0002, "HCN_E_ENDPOINT_NOT_FOUND", AnyCall, "x/sys/windows zerrors"},
		{0x803B0034, "HCN_E_ENDPOINT_NOT_ATTACHED", AnyCall, "detaching an endpoint that is not attached: nothing to do (Azure CNI PR 1272)"},
	}},
	{ErrPortInUse, "port-in-use", RetryNever, false, []Answer{
		{0x803B0013, "HCN_E_PORT_ALREADY_EXISTS", AnyCall, "hcsshim IsPortAlreadyExistsError; service-fabric-issues#1647 (a NAT port mapped twice), kubernetes#137530 (a port HNS kept after a delete)"},
		{0x20, "ERROR_SHARING_VIOLATION", ClaimingPorts, "moby 36983: a host process holds the port"},
		{0xB7, "ERROR_ALREADY_EXISTS", ClaimingPorts, "moby 23086"},
		{0x1392, "ERROR_OBJECT_ALREADY_EXISTS", ClaimingPorts, "moby 23086, kubernetes 74766: \"The object already exists\""},
		{0x803B0012, "HCN_E_POLICY_ALREADY_EXISTS", ClaimingPorts, "x/sys/windows zerrors"},
	}},
	{ErrAlreadyAttached, "already-attached", RetryNever, false, []Answer{
		{0x803B0014, "HCN_E_ENDPOINT_ALREADY_ATTACHED", AnyCall, "x/sys/windows zerrors"},
		{0x803B002B, "HCN_E_ENDPOINT_NAMESPACE_ALREADY_EXISTS", AnyCall, "x/sys/windows zerrors"},
	}},
	{ErrInUse, "in-use", RetryNever, false, []Answer{
		{0x803B002C, "HCN_E_ENTITY_HAS_REFERENCES", AnyCall, "x/sys/windows zerrors; delete while attached: unverified"},
	}},
	{ErrMappingNotSupported, "mapping-not-supported", RetryNever, false, []Answer{
		{0x803B0016, "HCN_E_MAPPING_NOT_SUPPORTED", AnyCall, "\"port mapping is not supported on the given network\" (x/sys/windows zerrors)"},
	}},
	{ErrInvalid, "invalid", RetryNever, false, []Answer{
		{0x803B001B, "HCN_E_INVALID_JSON", AnyCall, ""},
		{0x803B000D, "HCN_E_INVALID_POLICY", AnyCall, ""},
		{0x803B000E, "HCN_E_INVALID_POLICY_TYPE", AnyCall, ""},
		{0x803B000A, "HCN_E_INVALID_NETWORK", AnyCall, ""},
		{0x803B000B, "HCN_E_INVALID_NETWORK_TYPE", AnyCall, ""},
		{0x803B000C, "HCN_E_INVALID_ENDPOINT", AnyCall, ""},
		{0x803B001E, "HCN_E_INVALID_IP", AnyCall, ""},
		{0x803B002D, "HCN_E_INVALID_INTERNAL_PORT", AnyCall, ""},
		{0x803B0015, "HCN_E_REQUEST_UNSUPPORTED", AnyCall, "the request cannot work on this host"},
		{0x803B002F, "HCN_E_ADDR_INVALID_OR_RESERVED", AnyCall, "the request cannot work for this address"},
	}},
	{ErrExists, "exists", RetryNever, false, []Answer{
		{0x1392, "ERROR_OBJECT_ALREADY_EXISTS", CreatingNetwork, "docker/for-win 1384: a second NAT network"},
		{0x803B0010, "HCN_E_NETWORK_ALREADY_EXISTS", AnyCall, ""},
		{0xB7, "ERROR_ALREADY_EXISTS", CreatingNetwork, ""},
	}},
	{ErrAttachFailed, "attach-failed", RetryFew, false, []Answer{
		{0x803B0027, "GCN_E_NETCOMPARTMENT_NOT_FOUND", AnyCall, "x/sys/windows zerrors; Windows-Containers#401 (a compartment exists once a container runs)"},
		{0x803B002E, "HCN_E_NAMESPACE_ATTACH_FAILED", AnyCall, "x/sys/windows zerrors"},
	}},
	{ErrUnavailable, "unavailable", RetryAlways, false, []Answer{
		{0x803B0020, "HCN_E_MANAGER_STOPPED", AnyCall, "HNS is restarting"},
		{0x6BA, "RPC_S_SERVER_UNAVAILABLE", AnyCall, "HNS's RPC endpoint gone while it restarts"},
		{0x6BE, "RPC_S_CALL_FAILED", AnyCall, "HNS's RPC endpoint gone while it restarts"},
		{0x6D9, "EPT_S_NOT_REGISTERED", AnyCall, "HNS's RPC endpoint not registered yet (boot, restart)"},
	}},
	{ErrNotInstalled, "not-installed", RetryNever, false, nil},
}

// Kinds returns the table (for tests and the docs).
func Kinds() []Kind { return slices.Clone(kinds) }

// KindOf is err's row, nil when no row matches: HNS failing in a way
// nobody has mapped (E_FAIL).
func KindOf(err error) *Kind {
	if err == nil {
		return nil
	}
	for i := range kinds {
		if errors.Is(err, kinds[i].Err) {
			return &kinds[i]
		}
	}
	return nil
}

// RetryOf is the table's verdict on err.
func RetryOf(err error) Retry {
	if k := KindOf(err); k != nil {
		return k.Retry
	}
	return RetryUnknown
}

// FromCode is the typed error HNS means by code in a call, nil when the
// table does not know it. The Windows adapter wraps hcsshim's error with
// it.
func FromCode(code Code, call Call) error {
	for _, k := range kinds {
		for _, a := range k.Answers {
			if a.Code == code && (a.Call == AnyCall || a.Call == call) {
				return k.Err
			}
		}
	}
	return nil
}

// CodeOf is what HNS answers for err: its kind's first code, or E_FAIL.
func CodeOf(err error) Code {
	if k := KindOf(err); k != nil && len(k.Answers) > 0 {
		c := k.Answers[0].Code
		if c < 0x10000 { // a Win32 code travels as its HRESULT
			c |= 0x80070000
		}
		return c
	}
	return 0x80004005 // E_FAIL
}

// AllCodes lists every code the table knows in a call, each once.
func AllCodes(call Call) []Code {
	var out []Code
	for _, k := range kinds {
		for _, a := range k.Answers {
			if (a.Call == AnyCall || a.Call == call) && !slices.Contains(out, a.Code) {
				out = append(out, a.Code)
			}
		}
	}
	return out
}

// ErrInternal is an HNS failure with no meaning the table gives (E_FAIL):
// what the simulator's "internal" fault and wire error stand for.
var ErrInternal = errors.New("hns internal error (E_FAIL)")

// NameOf is err's name on the simulator's wire: its kind's, or "internal".
func NameOf(err error) string {
	if k := KindOf(err); k != nil {
		return k.Name
	}
	return "internal"
}

// Named is the error of a wire or fault name; ok is false for an unknown
// name.
func Named(name string) (error, bool) {
	if name == "internal" {
		return ErrInternal, true
	}
	for _, k := range kinds {
		if k.Name == name {
			return k.Err, true
		}
	}
	return nil, false
}

// Names lists every wire and fault name, "internal" last.
func Names() []string {
	out := make([]string, 0, len(kinds)+1)
	for _, k := range kinds {
		out = append(out, k.Name)
	}
	return append(out, "internal")
}

// Permanent reports whether retrying the same HCN request cannot help: the
// object is gone, the host port is held, HNS rejected the request as
// invalid, the endpoint is attached or still referenced, HNS is not
// installed.
func Permanent(err error) bool { return RetryOf(err) == RetryNever }

// Failed reports whether err is HNS failing a call, as the table says: a
// not-found answer is HNS answering (the plugin asks for a namespace or an
// endpoint that may be gone on purpose), not HNS failing.
func Failed(err error) bool {
	k := KindOf(err)
	return err != nil && (k == nil || !k.Answered)
}

// Retryable reports whether err says HNS could not be asked or did not
// answer in time (unreachable, restarting, a call given up on, a listing
// that raced a change): worth retrying for as long as the work matters.
// An error that is neither this nor Permanent may pass after a few tries
// (RetryFew), or is unclassified (RetryUnknown): HNS failed in a way
// nobody has mapped yet, worth a few retries only.
func Retryable(err error) bool { return RetryOf(err) == RetryAlways }

// RetriesFew reports whether err may pass after a few tries (the
// namespace's compartment not there yet, or going away: the next try finds
// which).
func RetriesFew(err error) bool { return RetryOf(err) == RetryFew }

// Steps of the endpoint lifecycle, as named in errors.
const (
	StepEnsureNetwork  = "ensure network"
	StepLookupEndpoint = "look up endpoint"
	StepCreateEndpoint = "create endpoint"
	StepAttachEndpoint = "attach endpoint"
	StepDetachEndpoint = "detach endpoint"
	StepDeleteEndpoint = "delete endpoint"
	StepListEndpoints  = "list endpoints"
	StepLookupNS       = "look up namespace"
)

// StepError says which step of an HCN operation failed and on what.
type StepError struct {
	Step   string // one of the Step* constants
	Object string // endpoint name or ID, network name, namespace GUID
	Err    error
}

func (e *StepError) Error() string {
	if e.Object == "" {
		return fmt.Sprintf("hcn: %s: %v", e.Step, e.Err)
	}
	return fmt.Sprintf("hcn: %s %s: %v", e.Step, e.Object, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

func stepErr(step, object string, err error) error {
	if err == nil {
		return nil
	}
	return &StepError{Step: step, Object: object, Err: err}
}

// NamespaceGone reports whether err says the namespace an endpoint was being
// attached to no longer exists: the sandbox stopped meanwhile, and the
// manager has rolled the endpoint back.
func NamespaceGone(err error) bool {
	var se *StepError
	return errors.As(err, &se) && se.Step == StepAttachEndpoint && errors.Is(err, ErrNotFound)
}

// Reading is what one HNS answer means to the call that asked it: an
// error of the table above means one thing to every call (its kind), and
// for some calls also something of its own, each a row of readings.
type Reading int

// Readings of an answer: the call failed, and the step with it
// (ReadFailure); what the step wanted is so already (ReadDone); what was
// asked for is not there, an answer (ReadAbsent); HNS may have done what
// was asked, so what it holds is read back (ReadBack); HNS changed while
// it was read, so it is read again, ManagerConfig.ListingAttempts times at
// most (ReadAgain); what the step stood on is gone, so it fails as HNS
// having changed and the plan is made again (ReadChanged); HNS takes one
// of these only, so the one that exists is used (ReadTakeOne); the
// endpoint is still attached as its detach failed, whose error says why
// (ReadDetachSays).
const (
	ReadFailure Reading = iota
	ReadDone
	ReadAbsent
	ReadBack
	ReadAgain
	ReadChanged
	ReadTakeOne
	ReadDetachSays
)

// readingRow is one answer's meaning to one call (Service's method name,
// as the metrics name it); Err nil matches every error.
type readingRow struct {
	Call    string
	Err     error
	Reading Reading
	Why     string
}

// readings is the one place an answer is given a meaning of its call's:
// the manager asks ReadingOf wherever it reads an answer. First match wins.
var readings = []readingRow{
	{"ListEndpointsByName", ErrNotFound, ReadAgain, "hcsshim opens each endpoint it lists: one deleted in between fails the listing whole"},
	{"ListEndpointsOfNetwork", ErrNotFound, ReadAgain, "as ListEndpointsByName"},
	{"ListEndpoints", ErrNotFound, ReadAgain, "as ListEndpointsByName"},
	{"GetNetworkByName", ErrNotFound, ReadAbsent, "no network of that name: created where the manager creates it"},
	{"CreateNetwork", ErrExists, ReadTakeOne, "HNS takes one NAT network and refuses a second (docker/for-win 1384)"},
	{"CreateEndpoint", ErrNotFound, ReadChanged, "the network the endpoint was asked on is gone (HNS restarted, an operator removed it)"},
	{"CreateEndpoint", nil, ReadBack, "a create given up on, or whose answer was lost, may have taken effect: found by name"},
	{"AddNamespaceEndpoint", ErrAlreadyAttached, ReadBack, "an earlier attach HNS completed after the plugin gave up on it"},
	{"RemoveNamespaceEndpoint", ErrNotFound, ReadDone, "detached already, or its namespace is gone (Azure CNI PR 1272)"},
	{"DeleteEndpoint", ErrNotFound, ReadDone, "deleted already"},
	{"DeleteEndpoint", ErrInUse, ReadDetachSays, "still attached: HNS deletes no attached endpoint (unverified)"},
	{"GetNamespace", ErrNotFound, ReadAbsent, "the namespace is gone: its sandbox stopped"},
	{"GetEndpoint", ErrNotFound, ReadAbsent, "an endpoint deleted meanwhile"},
}

// ReadingOf is what err, the answer to call, means to it: ReadDone for
// nil, its row's reading, else ReadFailure.
func ReadingOf(call string, err error) Reading {
	if err == nil {
		return ReadDone
	}
	for _, r := range readings {
		if r.Call == call && (r.Err == nil || errors.Is(err, r.Err)) {
			return r.Reading
		}
	}
	return ReadFailure
}
