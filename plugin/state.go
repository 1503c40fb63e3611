package plugin

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

// The controller's state: one record per sandbox, in two halves with one
// writer each. Triggers (triggers.go) write only the inbox: what they saw.
// Workers write only what is known, and only by committing a sync's
// outcome whole (commit). A sync reads both halves once, as a snapshot.
//
//	field            written by                read by
//	inbox.pod        triggers (fullest wins)   snapshot
//	inbox.gen        every trigger             snapshot, commit (waiters, idle)
//	inbox.startGen   starts (NRI, /tasks/start) snapshot: a start since the last sync
//	inbox.actGen     every trigger but the      snapshot: anything to decide
//	                 start-up listing
//	inbox.verifyGen  reconciles (not listed     snapshot: ask containerd
//	                 by containerd)
//	inbox.listedGen,  listings of HNS           snapshot: what HNS showed
//	inbox.listed
//	inbox.stopped    stops (NRI, /tasks/exit)  snapshot: the tombstone
//	inbox.removed    RemovePodSandbox,         snapshot, commit (drop)
//	                 /containers/delete
//	inbox.claimed    NRI requests, Synchronize snapshot: a CRI sandbox
//	inbox.startedAt, the first start          snapshot: start-to-mapped
//	inbox.startPath  (NRI, /tasks/start)
//	inbox.waiters    added by triggers,        commit: each is told once
//	                 taken by commit
//	known.*          commit, from the outcome  snapshot, the read-only
//	                 of the sandbox's own sync  queries (ports, holders, gauges,
//	                 (known.err: its error)     a start past its deadline)
//	pending          claim, by the sandbox's   claim (the index), commit
//	                 own sync; commit ends it   (ends it)
//	index            claim (pending) and       claim
//	                 commit (known.ports)
//	loaded           the first listing of HNS  snapshot (a record never
//	                 (markLoaded, once)         committed: no endpoint)
type record struct {
	in    inbox
	known known
	// pending is the host ports the sandbox's running sync claimed: held
	// in the index beside known.ports until its commit confirms them (they
	// become known.ports) or releases them
	pending     []hcn.PortMappingPolicy
	pendingName string // the claimer's namespace/name, for another pod's conflict message
}

// inbox is what triggers saw of a sandbox since it was first seen. The
// generations order what a sync has seen: a trigger whose generation is
// above known.synced came after the last sync began.
type inbox struct {
	pod       Pod
	gen       uint64
	startGen  uint64
	actGen    uint64
	verifyGen uint64
	listedGen uint64
	listed    []hcn.Endpoint // our endpoints of the sandbox in the last listing
	stopped   bool           // a stop was seen, and a stop is final
	removed   bool           // containerd forgot the sandbox
	claimed   bool           // a trigger knows it is a CRI sandbox
	hyperVGen uint64         // ncproxy's last Setup (SetUpHyperV): its VM takes our endpoint as a NIC
	waiters   []waiter
	// startedAt and startPath: when and by which path its first start was
	// seen (the start-to-mapped latency)
	startedAt time.Time
	startPath string
}

// known is what the workers found and made of a sandbox: written whole by
// commit, from the sandbox's own sync.
type known struct {
	eps      []hcn.Endpoint // our endpoints as HNS holds them, when epsKnown
	epsKnown bool
	ports    []hcn.PortMappingPolicy // the host ports its endpoint maps, held in the index (admitted when built)
	// unsure: host ports a call HNS may still have acted on asked for (a
	// create given up on finishes late, a build under inputs that changed
	// before its commit): held in the index until a sync finds what HNS
	// holds and the call can no longer take effect, never taken as
	// admitted; unsureSince: when the last such call was given up on
	unsure      []hcn.PortMappingPolicy
	unsureSince time.Time
	cni         []CNIMapping // its host ports the CNI's endpoint maps
	// foreignDNS: its endpoint, kept, carries DNS other than the pod's
	foreignDNS bool
	name       string // namespace/name, for another pod's conflict message
	namespace  string // its Kubernetes namespace, when known (a relabel syncs it again)
	// confirmed counts syncs that found it live with its endpoint in
	// place: a conflict waiting for it is then decided
	confirmed uint64
	waitFor   *holderWait // a conflict waiting for its holder's own sync
	final     bool        // containerd said its task stopped: a tombstone
	gone      bool        // containerd no longer has it
	sandbox   bool        // containerd said it is a CRI sandbox
	err       error       // what its last sync failed with (nil: it did not)
	reason    string      // the reason its owners were told it fails with ("": none)
	timed     bool        // its start-to-mapped latency was observed
	// set by commit
	committed bool   // a sync has committed it
	synced    uint64 // the inbox generation the last sync began with
	// setUpTo: ncproxy's Setups up to this inbox generation have had their
	// work done (a sync's final outcome, whatever it came to): its utility
	// VM has taken what it was given, and takes nothing later
	setUpTo uint64
}

// holds reports whether what is known holds anything in HNS or the index,
// or says that HNS must be asked (once HNS was listed, loaded: before,
// a sandbox without a record is not known to have nothing either).
func (k known) holds(loaded bool) bool {
	return len(k.ports) > 0 || len(k.unsure) > 0 || len(k.eps) > 0 || len(k.cni) > 0 || (loaded && !k.epsKnown)
}

// settled: what HNS holds for the sandbox is known, and no call given up
// on may still change it.
func (k known) settled() bool { return k.epsKnown && len(k.unsure) == 0 }

// indexed is what it holds in the port index: its endpoint's ports and
// those a call may have taken.
func (k known) indexed() []hcn.PortMappingPolicy { return held(k.ports, k.unsure) }

// holderWait is a conflict seen with a holder whose own sync has not yet
// told whether it still runs: the holder's confirmed count at that moment.
type holderWait struct {
	holder string
	seen   uint64
}

// state is the controller's one store: every sandbox's record, the index of
// host ports, and whether HNS has been listed. One lock guards it.
type state struct {
	mu     sync.Mutex
	recs   map[string]*record
	index  portIndex
	loaded bool // a listing of HNS was taken: a sandbox never synced has no endpoint but what it listed
}

func newState() *state {
	return &state{recs: map[string]*record{}, index: newPortIndex()}
}

// sighting is what a trigger saw of a sandbox: a value, which the state
// writes into the sandbox's inbox (trigger).
type sighting struct {
	pod     *Pod // the request as the trigger knows it (nil: nothing new)
	start   bool // the sandbox runs
	stop    bool // it stopped, for good
	remove  bool // containerd no longer has it
	claim   bool // it is a CRI sandbox (an NRI request, Synchronize's list)
	verify  bool // a listing of containerd lacked it
	listing bool // a listing of HNS was taken: listed is what it showed of the sandbox
	listed  []hcn.Endpoint
	learn   bool    // the start-up listing: it only tells what HNS holds, and asks for no decision
	wait    *waiter // told the outcome of a sync that begins after this
	path    string  // a start's path (PathNRI, PathEvents); "" for none measured
	// hyperV: ncproxy asks the NodeNetworkService to set the sandbox's
	// network up (its utility VM takes our endpoint as a NIC)
	hyperV bool
}

// trigger writes what a trigger saw of id into its inbox (making the
// record when it is new): the one writer of inboxes.
func (s *state) trigger(id string, seen sighting) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.recs[id]
	if r == nil {
		r = &record{}
		s.recs[id] = r
	}
	in := &r.in
	in.gen++
	if !seen.learn {
		in.actGen = in.gen
	}
	if seen.pod != nil && (in.pod.ID == "" || !seen.pod.Partial) { // a whole request is not replaced by a partial one
		in.pod = podOf(*seen.pod)
	}
	if seen.start {
		in.startGen = in.gen
		if seen.path != "" && in.startedAt.IsZero() {
			in.startedAt, in.startPath = time.Now(), seen.path
		}
	}
	if seen.verify {
		in.verifyGen = in.gen
	}
	if seen.listing {
		in.listedGen, in.listed = in.gen, slices.Clone(seen.listed)
	}
	in.stopped = in.stopped || seen.stop
	in.removed = in.removed || seen.remove
	in.claimed = in.claimed || seen.claim
	if seen.hyperV {
		in.hyperVGen = in.gen
	}
	if seen.wait != nil {
		w := *seen.wait
		w.gen = in.gen
		in.waiters = append(in.waiters, w)
	}
}

// podOf is the request a trigger gives, keeping only what the controller
// reads (the runtime's maps are not held on to).
func podOf(p Pod) Pod {
	out := p
	out.Annotations = nil
	for _, k := range []string{request.AnnotationPortMappings, AnnotationConfigSource} {
		if v, ok := p.Annotations[k]; ok {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	out.Labels = maps.Clone(p.Labels)
	return out
}

// waiter is told the outcome of a sandbox's sync: of the first attempt
// after it was added (first), or of the final one (after the retries of
// failures that pass). A request that must answer (NRI, a reconcile)
// waits on ch; an event's outcome is counted by the worker as kind.
type waiter struct {
	gen   uint64 // the inbox generation it was added at
	first bool
	kind  string        // event-start, event-stop: counted as that operation
	ch    chan<- result // nil: nobody waits
}

type result struct {
	change Change
	err    error
	// what HNS holds for the sandbox after the sync: its endpoints of
	// ours, and the other endpoints of its namespace where it read them
	eps            []hcn.Endpoint
	neighbours     []hcn.Endpoint
	neighboursRead bool
}

// snap is what one sync reads of its sandbox: one copy, taken as it begins.
type snap struct {
	id      string
	gen     uint64 // the inbox generation it began with
	attempt int    // of the current work: 1 for the first (the queue's count)
	pod     Pod
	started bool // a start was seen since the last sync: the sandbox runs
	act     bool // a trigger since the last sync asks for a decision (or this is a retry)
	verify  bool // a listing of containerd lacked it since the last sync
	// listed is what a listing of HNS showed since the last sync
	// (listing: there was one)
	listed  []hcn.Endpoint
	listing bool
	stopped bool // the tombstone: a stop seen, or containerd said so
	removed bool // containerd forgot it: a trigger said so, or a sync found it
	sandbox bool // known to be a CRI sandbox (a trigger or containerd said so)
	hyperV  bool // ncproxy asked for its network (a SetUpHyperV) and waits for this sync's work
	known   known
	// startedAt and startPath: when and how its first start was seen
	startedAt time.Time
	startPath string
}

// snapshot reads id's record for a sync on its attempt-th try; ok is false
// when there is no record.
func (s *state) snapshot(id string, attempt int) (sn snap, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.recs[id]
	if r == nil {
		return sn, false
	}
	in, k := r.in, r.known
	if !k.committed { // nothing known of its own: the state's listing says it has no endpoint
		k.epsKnown = s.loaded
	}
	k.eps, k.ports, k.unsure, k.cni = slices.Clone(k.eps), slices.Clone(k.ports), slices.Clone(k.unsure), slices.Clone(k.cni)
	return snap{id: id, gen: in.gen, attempt: attempt, pod: in.pod,
		// ports held for a given-up call make every sync look at HNS again
		started: in.startGen > k.synced, act: in.actGen > k.synced || attempt > 1 || len(k.unsure) > 0, verify: in.verifyGen > k.synced,
		listed: slices.Clone(in.listed), listing: in.listedGen > k.synced,
		stopped: in.stopped || k.final, removed: in.removed || k.gone, sandbox: in.claimed || k.sandbox, hyperV: in.hyperVGen > k.setUpTo, known: k,
		startedAt: in.startedAt, startPath: in.startPath}, true
}

// commit writes what a sync of id found and made (out.known, whole), and
// returns the waiters its outcome answers: those that were there when it
// began (all of them, or, when it is retried, those that wait for a first
// attempt only). A record that holds nothing and expects nothing is
// dropped; a stopped sandbox's tombstone stays until containerd forgets it.
func (s *state) commit(id string, sn snap, out known, retrying bool) []waiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.recs[id]
	if r == nil {
		return nil
	}
	out.committed, out.synced = true, sn.gen
	if !retrying { // the work is done: ncproxy's Setups until now are answered
		out.setUpTo = sn.gen
	}
	s.index.set(id, held(r.known.indexed(), r.pending), out.indexed()) // the claim ends: confirmed as out.ports, kept as out.unsure, or released
	r.known, r.pending, r.pendingName = out, nil, ""
	var tell, keep []waiter
	for _, w := range r.in.waiters {
		if w.gen <= sn.gen && (!retrying || w.first) {
			tell = append(tell, w)
		} else {
			keep = append(keep, w)
		}
	}
	r.in.waiters = keep
	// a sandbox's tombstone stays while containerd has it; an application
	// container's exit (never known as a sandbox) leaves nothing
	tombstone := (r.in.stopped || out.final) && !(r.in.removed || out.gone) && (r.in.claimed || out.sandbox)
	// a pod whose mappings fail is kept while it is failing: it is counted
	// (Failing), and the next trigger finds its record
	if !retrying && len(keep) == 0 && r.in.gen <= sn.gen && !out.holds(s.loaded) && !tombstone && out.reason == "" {
		delete(s.recs, id)
	}
	return tell
}

// markLoaded records that HNS has been listed and every sandbox it showed
// has a record: a sandbox never synced has no endpoint but what it listed.
func (s *state) markLoaded() {
	s.mu.Lock()
	s.loaded = true
	s.mu.Unlock()
}

// claim reserves policies' host ports for id's running sync, in one step
// under the state's lock: the check and the reservation cannot be split by
// another sandbox's claim. It returns nil when no other sandbox holds or
// claims one of them (the claim then holds them until id's commit), or a
// *ConflictError naming the first holder and how many syncs had confirmed
// it live by then (its wait). name is the claimer's namespace/name.
func (s *state) claim(id, name string, policies []hcn.PortMappingPolicy) *ConflictError {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ce := s.index.conflict(id, policies); ce != nil {
		if h := s.recs[ce.HolderID]; h != nil {
			ce.Holder, ce.confirmed = cmp.Or(h.known.name, h.pendingName), h.known.confirmed
		}
		return ce
	}
	r := s.recs[id]
	if r == nil {
		return nil // no record, nothing to hold (a sync always has one)
	}
	s.index.set(id, held(r.known.indexed(), r.pending), held(r.known.indexed(), policies))
	r.pending, r.pendingName = slices.Clone(policies), name
	return nil
}

// held is what a sandbox holds in the index: its confirmed ports and its
// claim.
func held(ports, pending []hcn.PortMappingPolicy) []hcn.PortMappingPolicy {
	if len(pending) == 0 {
		return ports
	}
	return slices.Concat(ports, pending)
}

// lastErr is what the last sync of id failed with (nil: it did not, or
// none ran).
func (s *state) lastErr(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.recs[id]; r != nil {
		return r.known.err
	}
	return nil
}

// inNamespace returns the sandboxes of Kubernetes namespace ns whose last
// sync failed for a reason the namespace's labels decide.
func (s *state) inNamespace(ns string, decided func(known) bool) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id, r := range s.recs {
		if (ns == "" || r.known.namespace == ns) && decided(r.known) {
			out = append(out, id)
		}
	}
	return out
}

// mappings is who maps each host port of every sandbox holding something:
// its own endpoint's, and the CNI's.
func (s *state) mappings() []SandboxMappings {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []SandboxMappings
	for id, r := range s.recs {
		k := r.known
		if len(k.eps) == 0 && len(k.cni) == 0 {
			continue
		}
		m := SandboxMappings{Sandbox: id, Pod: k.name, Ours: slices.Clone(k.ports), CNI: slices.Clone(k.cni)}
		if len(k.eps) > 0 {
			m.Endpoint = k.eps[0].ID
			m.ForeignDNS = k.foreignDNS
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

// failing counts the sandboxes whose last sync failed, by the reason their
// owners are told (errors that are not the owners' business are not
// counted: a sandbox gone, the plugin stopping).
func (s *state) failing() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, r := range s.recs {
		if r.known.reason != "" { // a stop's sync ends it
			out[r.known.reason]++
		}
	}
	return out
}

// endpointCount is how many sandboxes have an endpoint, as far as known.
func (s *state) endpointCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.recs {
		if len(r.known.eps) > 0 {
			n++
		}
	}
	return n
}

// ErrPortConflict: another pod already holds the host port.
var ErrPortConflict = errors.New("host port held by another pod")

// ConflictError names the mapping and the pod that holds its port.
type ConflictError struct {
	Policy   hcn.PortMappingPolicy
	HolderID string // sandbox ID of the holder
	Holder   string // namespace/name of the holder, when known
	// confirmed: how many syncs had found the holder live with its
	// endpoint when the conflict was seen (its wait: holderWait)
	confirmed uint64
}

func (e *ConflictError) Error() string {
	who := "sandbox " + e.HolderID
	if e.Holder != "" {
		who = "pod " + e.Holder + " (sandbox " + e.HolderID + ")"
	}
	return fmt.Sprintf("host port %s is already held by %s", e.Policy.String(), who)
}

func (e *ConflictError) Unwrap() error { return ErrPortConflict }

// portKey groups policies that can collide: same protocol, host port and
// address family.
type portKey struct {
	proto hcn.Protocol
	port  uint16
	v6    bool
}

func keyOf(p hcn.PortMappingPolicy) portKey {
	return portKey{proto: p.Protocol, port: p.ExternalPort, v6: p.IsIPv6()}
}

// portIndex knows which sandbox holds which host port, so conflicts are
// found before HNS is called and reported with the other pod's name.
// Checks cost O(mappings of the pod), not O(pods on the node). It is part
// of the controller's state and guarded by its lock.
type portIndex map[portKey]map[string][]string // key -> sandbox ID -> VIPs ("" = every address)

func newPortIndex() portIndex { return portIndex{} }

// conflict returns a *ConflictError when a sandbox other than id holds one
// of policies' host ports.
func (x portIndex) conflict(id string, policies []hcn.PortMappingPolicy) *ConflictError {
	for _, p := range policies {
		for holder, vips := range x[keyOf(p)] {
			if holder == id {
				continue
			}
			for _, vip := range vips {
				if vip == "" || p.VIP == "" || vip == p.VIP {
					return &ConflictError{Policy: p, HolderID: holder}
				}
			}
		}
	}
	return nil
}

// set replaces what id holds (old) with policies.
func (x portIndex) set(id string, old, policies []hcn.PortMappingPolicy) {
	for _, p := range old {
		k := keyOf(p)
		delete(x[k], id)
		if len(x[k]) == 0 {
			delete(x, k)
		}
	}
	for _, p := range policies {
		k := keyOf(p)
		if x[k] == nil {
			x[k] = map[string][]string{}
		}
		x[k][id] = append(x[k][id], p.VIP)
	}
}

// SandboxMappings is who maps the host ports of one sandbox, as the
// controller knows it: its own endpoint's, and the CNI's.
type SandboxMappings struct {
	Sandbox  string                  `json:"sandbox"`
	Pod      string                  `json:"pod,omitempty"`      // namespace/name
	Endpoint string                  `json:"endpoint,omitempty"` // ours
	Ours     []hcn.PortMappingPolicy `json:"ours,omitempty"`
	CNI      []CNIMapping            `json:"cni,omitempty"`
	// ForeignDNS: our endpoint carries DNS other than the pod's (built by
	// an earlier release, which sent none, so HNS filled in the node's):
	// kept, since a rebuild would drop the pod's host ports; the pod's
	// next sandbox gets its own
	ForeignDNS bool `json:"foreignDNS,omitempty"`
}

// ForeignDNS counts the sandboxes whose endpoint carries DNS other than
// the pod's (SandboxMappings.ForeignDNS).
func (s *state) foreignDNS() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.recs {
		if len(r.known.eps) > 0 && r.known.foreignDNS {
			n++
		}
	}
	return n
}
