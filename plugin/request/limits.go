package request

import (
	"errors"
	"fmt"
)

// Limits bound what one pod can ask for, so that no annotation a pod author
// writes can hold up the runtime's node-wide NRI lock or ask HNS for an
// endpoint with thousands of policies. Zero means no limit.
type Limits struct {
	MaxMappings int // mappings per pod, every source counted (plugin.max_mappings_per_pod)
	MaxBytes    int // bytes of the annotation value (plugin.max_annotation_bytes)
}

// ErrTooLarge is wrapped (besides ErrBadMapping) by the errors of a request
// over the limits.
var ErrTooLarge = errors.New("port-mapping request over the limit")

// LimitError says which limit a request exceeds, by how much.
type LimitError struct {
	What  string // "entries" or "bytes"
	Count int
	Limit int
	Key   string // the configuration key of the limit
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%d %s, more than the limit of %d (%s)", e.Count, e.What, e.Limit, e.Key)
}

// Unwrap makes a LimitError both a bad mapping and a too-large request.
func (e *LimitError) Unwrap() []error { return []error{ErrBadMapping, ErrTooLarge} }

// Configuration keys of the limits, named in errors.
const (
	KeyMaxMappings = "plugin.max_mappings_per_pod"
	KeyMaxBytes    = "plugin.max_annotation_bytes"
)

// checkCount rejects n mappings over the limit.
func (l Limits) checkCount(n int) error {
	if l.MaxMappings > 0 && n > l.MaxMappings {
		return &LimitError{What: "entries", Count: n, Limit: l.MaxMappings, Key: KeyMaxMappings}
	}
	return nil
}
