package hcn

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
)

func TestPermanentAndNamespaceGone(t *testing.T) {
	tests := []struct {
		name          string
		err           error
		permanent, ns bool
	}{
		{"not found", stepErr(StepLookupNS, "x", ErrNotFound), true, false},
		{"port in use", stepErr(StepCreateEndpoint, "x", ErrPortInUse), true, false},
		{"invalid", ErrInvalid, true, false},
		{"already attached", ErrAlreadyAttached, true, false},
		{"in use", fmt.Errorf("wrapped: %w", ErrInUse), true, false},
		{"unavailable", ErrUnavailable, false, false},
		{"unclassified", errors.New("E_FAIL"), false, false},
		{"nil", nil, false, false},
		{"namespace gone at attach", stepErr(StepAttachEndpoint, "ep to namespace n", ErrNotFound), true, true},
		{"attach failed otherwise", stepErr(StepAttachEndpoint, "ep", ErrUnavailable), false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Permanent(tt.err); got != tt.permanent {
				t.Errorf("Permanent(%v) = %v", tt.err, got)
			}
			if got := NamespaceGone(tt.err); got != tt.ns {
				t.Errorf("NamespaceGone(%v) = %v", tt.err, got)
			}
		})
	}
}

func TestStepErrorText(t *testing.T) {
	if got := stepErr(StepListEndpoints, "", ErrUnavailable).Error(); got != "hcn: list endpoints: hcn backend unavailable" {
		t.Errorf("no object: %q", got)
	}
	if got := stepErr(StepCreateEndpoint, "nri-hcn-portmap-x", ErrPortInUse).Error(); got != "hcn: create endpoint nri-hcn-portmap-x: host port already in use" {
		t.Errorf("with object: %q", got)
	}
}

// The table of HNS errors is the one place a code gets its meaning: every
// answer maps back to its kind in the calls it is limited to (and only
// there), the emulator's code for a kind maps back to it, names are
// unique and round-trip, and Permanent/Retryable/RetriesFew read the row.
func TestTableOfHNSErrors(t *testing.T) {
	names := map[string]bool{}
	for _, k := range Kinds() {
		if names[k.Name] {
			t.Errorf("name %q twice", k.Name)
		}
		names[k.Name] = true
		if got, ok := Named(k.Name); !ok || got != k.Err || NameOf(fmt.Errorf("x: %w", k.Err)) != k.Name {
			t.Errorf("%s: Named = %v, NameOf = %q", k.Name, got, NameOf(k.Err))
		}
		wrapped := fmt.Errorf("pod x: %w", k.Err)
		if Permanent(wrapped) != (k.Retry == RetryNever) || Retryable(wrapped) != (k.Retry == RetryAlways) || RetriesFew(wrapped) != (k.Retry == RetryFew) {
			t.Errorf("%s: Permanent %v, Retryable %v, RetriesFew %v; row says %v", k.Name, Permanent(wrapped), Retryable(wrapped), RetriesFew(wrapped), k.Retry)
		}
		for _, a := range k.Answers {
			if got := FromCode(a.Code, a.Call); got != k.Err {
				t.Errorf("%s %#x in its call: %v, want %v", a.Name, a.Code, got, k.Err)
			}
			if a.Call != AnyCall && FromCode(a.Code, AnyCall) != nil && FromCode(a.Code, AnyCall) == k.Err {
				t.Errorf("%s %#x means %v in every call, not only its own", a.Name, a.Code, k.Err)
			}
		}
		if len(k.Answers) > 0 {
			code := CodeOf(k.Err)
			if code < 0x10000 {
				t.Errorf("%s: CodeOf %#x is no HRESULT", k.Name, code)
			}
			hr := code
			if hr&0x1fff0000 == 0x00070000 { // as hcsshim keeps a Win32-facility HRESULT
				hr &= 0xffff
			}
			if got := FromCode(hr, k.Answers[0].Call); got != k.Err {
				t.Errorf("%s: the emulator answers %#x, which maps to %v", k.Name, code, got)
			}
		}
	}
	for _, tt := range []struct {
		code Code
		call Call
		want error
	}{
		{0x1392, ClaimingPorts, ErrPortInUse},
		{0x1392, CreatingNetwork, ErrExists},
		{0x1392, AnyCall, nil},
		{0x6BA, AnyCall, ErrUnavailable},
		{0x803B0027, AnyCall, ErrAttachFailed},
		{0x80004005, AnyCall, nil}, // E_FAIL: no meaning
	} {
		if got := FromCode(tt.code, tt.call); got != tt.want {
			t.Errorf("FromCode(%#x, %v) = %v, want %v", tt.code, tt.call, got, tt.want)
		}
	}
	if NameOf(errors.New("E_FAIL")) != "internal" || KindOf(errors.New("E_FAIL")) != nil || RetryOf(errors.New("E_FAIL")) != RetryUnknown {
		t.Error("an error nobody classified has a kind")
	}
	if !Retryable(fmt.Errorf("%w: %w", ErrChanged, ErrNotFound)) || Permanent(fmt.Errorf("%w: %w", ErrChanged, ErrNotFound)) {
		t.Error("a listing that raced a delete is final")
	}
}

// Every reading names a call the Service makes, and says why; the answers
// the manager reads per call mean what their rows say.
func TestEachCallReadsItsAnswersByItsRow(t *testing.T) {
	calls := map[string]bool{}
	svc := reflect.TypeFor[Service]()
	for i := range svc.NumMethod() {
		calls[svc.Method(i).Name] = true
	}
	for _, r := range readings {
		if !calls[r.Call] || r.Why == "" {
			t.Errorf("reading %+v: not a call of Service, or no why", r)
		}
	}
	for _, tc := range []struct {
		call string
		err  error
		want Reading
	}{
		{"DeleteEndpoint", nil, ReadDone},
		{"DeleteEndpoint", fmt.Errorf("x: %w", ErrNotFound), ReadDone},
		{"DeleteEndpoint", ErrInUse, ReadDetachSays},
		{"DeleteEndpoint", ErrUnavailable, ReadFailure},
		{"RemoveNamespaceEndpoint", ErrNotFound, ReadDone},
		{"GetEndpoint", ErrNotFound, ReadAbsent},
		{"GetNamespace", ErrNotFound, ReadAbsent},
		{"CreateEndpoint", ErrNotFound, ReadChanged},
		{"CreateEndpoint", ErrTimeout, ReadBack},
		{"CreateEndpoint", ErrPortInUse, ReadBack},
		{"AddNamespaceEndpoint", ErrAlreadyAttached, ReadBack},
		{"AddNamespaceEndpoint", ErrNotFound, ReadFailure},
		{"ListEndpoints", ErrNotFound, ReadAgain},
		{"CreateNetwork", ErrExists, ReadTakeOne},
		{"GetNetworkByName", ErrNotFound, ReadAbsent},
	} {
		if got := ReadingOf(tc.call, tc.err); got != tc.want {
			t.Errorf("ReadingOf(%s, %v) = %d, want %d", tc.call, tc.err, got, tc.want)
		}
	}
}
