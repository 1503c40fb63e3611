package plugin

import (
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// record is everything the controller knows of one sandbox. Triggers (the
// entry points in triggers.go) write what they saw: the request, a start,
// a stop, containerd forgetting the sandbox. Only the sync (sync.go) acts on
// it and writes what it found and made: the endpoints, the ports held.
type record struct {
	// written by triggers
	pod     Pod    // the request as the fullest trigger knew it
	started bool   // a start was seen since the last sync: the sandbox runs
	stopped bool   // the tombstone: a stop was seen, and a stop is final
	removed bool   // containerd forgot the sandbox: forget it once nothing is left
	verify  bool   // a listing of containerd lacked it: ask containerd
	sandbox bool   // known to be a CRI sandbox (not an application container)
	gen     uint64 // bumped by every trigger: which waiters a sync answers
	synced  uint64 // the generation the last sync began with
	waiters []waiter

	// written by the sync
	eps       []hcn.Endpoint // our endpoints as HNS holds them, when epsKnown
	epsKnown  bool
	ports     []hcn.PortMappingPolicy // the host ports it holds in the index
	cni       []CNIMapping            // its host ports the CNI's endpoint maps
	name      string                  // namespace/name, for the next pod's conflict message
	confirmed uint64                  // syncs that found it live with its endpoint in place
	waitFor   *holderWait             // a conflict waiting for its holder's own sync
	attempts  int                     // of the current work; 0 after a final outcome
	commit    uint64                  // state.seq when a sync last changed it
}

// holderWait is a conflict seen with a holder whose own sync has not yet
// told whether it still runs: the holder's confirmed count at that moment.
type holderWait struct {
	holder string
	seen   uint64
}

// holds reports whether the record holds anything in HNS or the index, or
// knows that HNS must be asked (once the state trusts its cache, a
// sandbox without a record has no endpoint).
func (r *record) holds(loaded bool) bool {
	return len(r.ports) > 0 || len(r.eps) > 0 || len(r.cni) > 0 || (loaded && !r.epsKnown)
}

// state is the controller's one store: every sandbox's record, the index of
// host ports, and whether the endpoint cache is trusted. One lock guards it.
type state struct {
	mu     sync.Mutex
	recs   map[string]*record
	index  portIndex
	loaded bool   // a listing of HNS was taken: a sandbox without a record has no endpoint
	seq    uint64 // counts syncs that changed a record
	// listings: HNS listings under way; records are not dropped meanwhile,
	// so that a listing is never applied to a sandbox it no longer describes
	listings int
}

func newState() *state {
	return &state{recs: map[string]*record{}, index: newPortIndex()}
}

// get returns id's record, making it when missing; the caller holds mu.
func (s *state) get(id string) *record {
	r := s.recs[id]
	if r == nil {
		r = &record{epsKnown: s.loaded}
		s.recs[id] = r
	}
	return r
}

// trigger records what a trigger saw of id (fn sees the record with its
// generation already bumped).
func (s *state) trigger(id string, fn func(r *record)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.get(id)
	r.gen++
	fn(r)
}

// syncInput is what a sync reads of the record when it starts.
type syncInput struct {
	pod              Pod
	gen              uint64
	started, stopped bool
	removed, verify  bool
	attempts         int
	waitFor          *holderWait
}

// begin hands the sync what triggers said; a start's evidence and a
// listing's doubt are used up by it. ok is false when there is no record.
func (s *state) begin(id string) (in syncInput, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.recs[id]
	if r == nil {
		return in, false
	}
	in = syncInput{pod: r.pod, gen: r.gen, started: r.started, stopped: r.stopped, removed: r.removed, verify: r.verify,
		attempts: r.attempts, waitFor: r.waitFor}
	r.started, r.verify = false, false
	r.synced = r.gen
	return in, true
}

// finish ends a sync of id: the waiters it answers (those that were there
// when it began: all of them, or with retry only those of the first
// attempt) are returned to be told, and a record that holds nothing and
// expects nothing is dropped.
func (s *state) finish(id string, in syncInput, retry bool) []waiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.recs[id]
	if r == nil {
		return nil
	}
	var tell, keep []waiter
	for _, w := range r.waiters {
		if w.gen <= in.gen && (!retry || w.first) {
			tell = append(tell, w)
		} else {
			keep = append(keep, w)
		}
	}
	r.waiters = keep
	if retry {
		r.attempts = in.attempts + 1
	} else {
		r.attempts, r.waitFor = 0, nil
	}
	s.dropIfIdle(id, r)
	return tell
}

// dropIfIdle forgets a record with nothing left to know: no ports, no
// endpoints, no tombstone (unless containerd forgot the sandbox too), no
// waiters, no work. Not while a listing of HNS is under way.
func (s *state) dropIfIdle(id string, r *record) {
	if s.listings > 0 || r.holds(s.loaded) || len(r.waiters) > 0 || r.attempts > 0 || r.gen > r.synced || (r.stopped && !r.removed) {
		return
	}
	delete(s.recs, id)
}

// forget drops the record of a sandbox containerd no longer has, once
// nothing of it is left.
func (s *state) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.recs[id]; r != nil {
		r.removed, r.cni = true, nil
		s.dropIfIdle(id, r)
	}
}

// endpoints returns the sandbox's endpoints as last known; known is false
// when HNS must be asked.
func (s *state) endpoints(id string) (eps []hcn.Endpoint, known bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.recs[id]
	if r == nil {
		return nil, s.loaded
	}
	return slices.Clone(r.eps), r.epsKnown
}

// setEndpoints records what HNS now holds for the sandbox (known), or that
// it is not known after a failure.
func (s *state) setEndpoints(id string, eps []hcn.Endpoint, known bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.get(id)
	r.eps, r.epsKnown = slices.Clone(eps), known
	if !known {
		r.eps = nil
	}
	s.seq++
	r.commit = s.seq
}

// setCNI records what the CNI maps of the sandbox's host ports; changed
// says whether that differs from what was recorded.
func (s *state) setCNI(id string, cni []CNIMapping) (changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.get(id)
	changed = !slices.Equal(r.cni, cni)
	r.cni = slices.Clone(cni)
	return changed
}

// tombstone marks the sandbox stopped (the sync found it so).
func (s *state) tombstone(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.get(id).stopped = true
}

// markSandbox remembers that id is a CRI sandbox.
func (s *state) markSandbox(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.recs[id]; r != nil {
		r.sandbox = true
	}
}

// isSandbox reports whether id is known to be a CRI sandbox.
func (s *state) isSandbox(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.recs[id]
	return r != nil && r.sandbox
}

// confirm counts a sync that found the sandbox live with its endpoint in
// place (a conflict waiting for it is then decided), and ends its own wait.
func (s *state) confirm(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.get(id)
	r.confirmed++
	r.waitFor = nil
}

// waitForHolder records that id's sync met a conflict with holder and waits
// for the holder's own sync; it returns whether the holder was confirmed
// live since id first waited for it (then the conflict is real).
func (s *state) waitForHolder(id, holder string, prev *holderWait) (decided bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.get(holder)
	if prev != nil && prev.holder == holder && h.confirmed > prev.seen {
		return true
	}
	if prev == nil || prev.holder != holder {
		s.get(id).waitFor = &holderWait{holder: holder, seen: h.confirmed}
	}
	return false
}

// reserve takes the sandbox's host ports in the index, unless another
// sandbox holds one of them; undo restores what it held before.
func (s *state) reserve(id, name string, policies []hcn.PortMappingPolicy) (undo func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.index.conflict(id, policies, func(holder string) string {
		if h := s.recs[holder]; h != nil {
			return h.name
		}
		return ""
	}); err != nil {
		return nil, err
	}
	r := s.get(id)
	prev, prevName := r.ports, r.name
	s.setPorts(id, r, name, policies)
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if r := s.recs[id]; r != nil {
			s.setPorts(id, r, prevName, prev)
		}
	}, nil
}

// release gives the sandbox's host ports back.
func (s *state) release(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.recs[id]; r != nil {
		s.setPorts(id, r, r.name, nil)
	}
}

func (s *state) setPorts(id string, r *record, name string, policies []hcn.PortMappingPolicy) {
	s.index.set(id, r.ports, policies)
	r.ports = slices.Clone(policies)
	if name != "" {
		r.name = name
	}
}

// startListing marks an HNS listing under way and returns the sequence
// number it starts at.
func (s *state) startListing() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.listings++
	return s.seq
}

// applyListing brings the endpoint cache in line with a full listing of
// our endpoints in HNS taken since seq: a sandbox the listing shows and the
// state does not know is adopted (its endpoints and host ports: pods
// started before a restart, endpoints a late HNS answer created); where the
// two disagree HNS will be asked again. A record a sync changed since the
// listing began is fresher than the listing and is left alone. It returns
// the sandboxes the listing showed.
func (s *state) applyListing(start uint64, owned map[string][]hcn.Endpoint) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.endListing()
	for id, eps := range owned {
		r := s.recs[id]
		switch {
		case r == nil:
			r = s.get(id)
			r.eps, r.epsKnown, r.sandbox = eps, true, true
			for _, ep := range eps {
				if len(r.ports) == 0 {
					s.setPorts(id, r, "", ep.PortMappings)
				}
			}
		case r.commit > start:
		case !r.epsKnown || !sameEndpoints(r.eps, eps):
			r.epsKnown, r.eps = false, nil
		}
	}
	for id, r := range s.recs {
		if _, ok := owned[id]; !ok && r.commit <= start && r.epsKnown && len(r.eps) > 0 {
			r.epsKnown, r.eps = false, nil
		}
	}
	s.loaded = true
	return slices.Collect(maps.Keys(owned))
}

// endListing ends a listing (the caller holds mu); records left idle
// meanwhile go.
func (s *state) endListing() {
	s.listings--
	if s.listings > 0 {
		return
	}
	for id, r := range s.recs {
		s.dropIfIdle(id, r)
	}
}

// abortListing ends a listing that failed.
func (s *state) abortListing() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.endListing()
}

// mappings is who maps each host port of every sandbox holding something:
// its own endpoint's, and the CNI's.
func (s *state) mappings() []SandboxMappings {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []SandboxMappings
	for id, r := range s.recs {
		if len(r.eps) == 0 && len(r.cni) == 0 {
			continue
		}
		m := SandboxMappings{Sandbox: id, Pod: r.name, Ours: slices.Clone(r.ports), CNI: slices.Clone(r.cni)}
		if len(r.eps) > 0 {
			m.Endpoint = r.eps[0].ID
		}
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b SandboxMappings) int { return strings.Compare(a.Sandbox, b.Sandbox) })
	return out
}

// ids returns every sandbox the state knows.
func (s *state) ids() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Keys(s.recs))
}

// endpointCount is how many sandboxes have an endpoint, as far as known.
func (s *state) endpointCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.recs {
		if len(r.eps) > 0 {
			n++
		}
	}
	return n
}

// counts is what the state holds, for tests.
type counts struct{ records, holding, tombstones int }

func (s *state) counts() counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	var c counts
	for _, r := range s.recs {
		c.records++
		if len(r.ports) > 0 {
			c.holding++
		}
		if r.stopped {
			c.tombstones++
		}
	}
	return c
}

func sameEndpoints(a, b []hcn.Endpoint) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.ContainsFunc(b, func(y hcn.Endpoint) bool {
			return x.ID == y.ID && x.Namespace == y.Namespace && hcn.SamePolicies(x.PortMappings, y.PortMappings)
		}) {
			return false
		}
	}
	return true
}
