package request

import (
	"fmt"
)

// MergeMappings combines annotation and CRI mappings: the same mapping from
// both counts once; a CRI mapping that claims a host port an annotation
// entry also claims, differently, is an error naming both. The merged list
// is held to lim. Linear in the number of mappings.
func MergeMappings(ann, cri []PortMapping, lim Limits) ([]PortMapping, error) {
	out := append(make([]PortMapping, 0, len(ann)+len(cri)), ann...)
	idx := newOverlapIndex(len(ann) + len(cri))
	for i, a := range out {
		idx.add(i, a)
	}
	for _, c := range cri {
		if j := idx.first(c); j >= 0 {
			if out[j] == c {
				continue // given by both sources: once
			}
			return nil, &MappingError{Entry: fmt.Sprintf("CRI hostPort %q", c.String()),
				Reason: fmt.Sprintf("conflicts with %q (annotation %s and Kubernetes hostPort disagree)", out[j].String(), AnnotationPortMappings)}
		}
		idx.add(len(out), c)
		out = append(out, c)
	}
	if err := lim.checkCount(len(out)); err != nil {
		return nil, fmt.Errorf("annotation and CRI hostPorts together: %w", err)
	}
	return out, nil
}
