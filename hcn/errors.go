package hcn

import (
	"errors"
	"fmt"
)

// Typed errors every Service implementation maps HNS failures onto. Test with
// errors.Is.
var (
	// ErrNotFound: the network, endpoint or namespace does not exist
	// (hcsshim's *NotFoundError types and HNS's raw ERROR_NOT_FOUND alike).
	ErrNotFound = errors.New("not found")
	// ErrPortInUse: another endpoint already holds the host port
	// (HCN_E_PORT_ALREADY_EXISTS).
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
	// ErrUnavailable: the backend cannot be reached or does not exist here.
	ErrUnavailable = errors.New("hcn backend unavailable")
	// ErrTimeout: the plugin gave up waiting for HNS (the call may still
	// take effect later, as HNS finishes what it started).
	ErrTimeout = errors.New("gave up waiting for HNS")
	// ErrChanged: HNS changed while it was being read (an endpoint deleted
	// during a listing, which hcsshim reports as not found): reading again
	// helps.
	ErrChanged = errors.New("HNS changed while it was being read")
)

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

// Permanent reports whether retrying the same HCN request cannot help: the
// object is gone, the host port is held, HNS rejected the request as
// invalid, or the endpoint is attached or still referenced. Anything else
// (HNS unreachable, a call that timed out, an unclassified HNS failure) may
// pass on a later try.
func Permanent(err error) bool {
	if errors.Is(err, ErrChanged) {
		return false
	}
	for _, final := range []error{ErrNotFound, ErrPortInUse, ErrInvalid, ErrAlreadyAttached, ErrInUse, ErrExists} {
		if errors.Is(err, final) {
			return true
		}
	}
	return false
}

// Retryable reports whether err says HNS could not be asked or did not
// answer in time (unreachable, restarting, a call given up on): worth
// retrying for as long as the work matters. An error that is neither this
// nor Permanent is unclassified: HNS failed in a way nobody has mapped yet,
// worth a few retries only.
func Retryable(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, ErrTimeout) || errors.Is(err, ErrChanged)
}

// NamespaceGone reports whether err says the namespace an endpoint was being
// attached to no longer exists: the sandbox stopped meanwhile, and the
// manager has rolled the endpoint back.
func NamespaceGone(err error) bool {
	var se *StepError
	return errors.As(err, &se) && se.Step == StepAttachEndpoint && errors.Is(err, ErrNotFound)
}
