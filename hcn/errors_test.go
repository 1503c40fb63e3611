package hcn

import (
	"errors"
	"fmt"
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
