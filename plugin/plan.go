package plugin

import (
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admission"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/hostsockets"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

// The values decide works with and returns: the inputs as a sync began,
// the facts the sync read for it, and the plan.

// inputs are the values a sync decides with, taken once as it began: the
// admission policy (a reload replaces it), the namespaces' labels as the
// API server had last said them, the configuration's options, and the
// moment. gen says which inputs these are: a sync whose inputs changed
// before it committed is decided again (the worker compares).
type inputs struct {
	gen            uint64
	now            time.Time
	lateBound      time.Duration              // Options.LateBound
	policy         *admission.Policy          // nil: admit everything
	labels         *admission.Labels          // as of now; nil: they cannot be read
	netpols        *admission.NetworkPolicies // as of now; nil: they cannot be read
	sources        request.Sources
	limits         request.Limits
	policyOptions  request.PolicyOptions
	hyperVHandlers []string
	nodeNetwork    bool // Options.NodeNetwork
	hostSockets    bool // the node's own sockets are read: a port a program holds is never mapped
}

// fact is one thing a sync read for decide: its value or the error
// reading it failed with, once it was read.
type fact[T any] struct {
	v    T
	err  error
	read bool
}

// facts are what the sync read for decide, each only once decide asked
// for it: containerd's record and the request resolved from it (once, as
// the record is read), its task, HCN's namespace, the other endpoints of
// the pod's namespace and their networks' types, the network the
// plugin's endpoints go on, and the sandbox's endpoints as HNS holds them.
// judged is decide's own judgement of the pod (steps 1 to 7) once it
// came to a build: the build's facts are read after it, and the pod is
// not judged again (admitted once a sync).
type facts struct {
	judged     *judged
	record     fact[*SandboxInfo]
	request    fact[request.Request]
	task       fact[TaskState]
	ns         fact[bool]
	neighbours fact[[]hcn.Endpoint]
	netTypes   fact[map[string]hcn.NetworkType] // canonical network ID -> type
	target     fact[hcn.Target]
	endpoints  fact[[]hcn.Endpoint]
	sockets    fact[[]hostsockets.Socket] // the node's own, on plan.ports
}

// ask is the facts decide needs before it can decide, a set: facts
// needed together are read in one pass (the node's sockets and the
// network, before a build).
type ask uint16

const (
	decided         ask = 0         // nothing more: the plan's steps are the decision
	askRecord       ask = 1 << iota // containerd's record of the sandbox (and the request resolved from it)
	askTask                         // containerd's state of the sandbox's task
	askNamespace                    // whether HCN still has the pod's namespace
	askNeighbours                   // the other endpoints of the pod's namespace
	askNetworkTypes                 // the types of the networks in plan.networks
	askTarget                       // the network the plugin's endpoints go on
	askEndpoints                    // the sandbox's endpoints as HNS holds them
	askHostSockets                  // the node's own sockets on plan.ports
)

// plan is a decision: the facts to read first (ask), or every step to take
// and the outcome once they are done. The steps, each taken only when the
// one before succeeded: claim want's host ports (when want is set), then
// HNS's steps in order. Then err, if any, is what the sync failed with;
// notOurs fails a stop that removed nothing of a container never known as
// a sandbox (an application container's).
type plan struct {
	ask      ask
	networks []string           // askNetworkTypes: the network IDs
	ports    []hostsockets.Port // askHostSockets: the ports
	judged   *judged            // the pod's judgement, kept for the next pass (a build's facts asked)
	out      outcome
	want     *wanted    // the endpoint the steps build, its host ports claimed first
	steps    []hcn.Step // HNS's steps
	remove   bool       // the steps remove everything the sandbox has
	removed  afterRemoval
	denied   bool // a refusal: kept is what stays in HNS after the steps
	kept     []hcn.Endpoint
	unsure   []hcn.PortMappingPolicy
	err      error
	notOurs  bool
}

// judged is a pod judged to have the endpoint w (decide's steps 1 to 7,
// admission included), with the outcome so far: what a build starts from.
type judged struct {
	out outcome
	w   wanted
}

// afterRemoval is what is known once a removal is done: containerd no
// longer has the sandbox, and the CNI's mappings are forgotten.
type afterRemoval struct{ gone, forgetCNI bool }

// wanted is the endpoint a sync decided the sandbox should have.
type wanted struct {
	netns    hcn.GUID
	policies []hcn.PortMappingPolicy
	cni      []CNIMapping
	dns      hcn.DNS
}

// outcome is what one sync comes to: what is known of the sandbox now (the
// worker commits it whole), what it did, and the error it failed with (not
// yet naming the pod: the worker names it once). What the pod's owners are
// told, the gauge, the log line and the retry all follow from the error's
// row in the table (errors.go) or, on success, from mapped.
type outcome struct {
	known  known
	change Change
	err    error
	pod    Pod     // the pod as the sync resolved it
	mapped *mapped // a pod whose host ports are in place: who maps them
	// unreadable: containerd's CRI record of the sandbox does not decode;
	// its hostPorts are not known (reported, never a failure of the pod)
	unreadable error
	skipped    []string // Observer.Skipped reasons
	line       line     // the sync's one log line when it succeeds
	also       []string // other sandboxes to sync: a host port's holder
	// recheck: the sandbox is synced again after this (ports a given-up
	// call asked for stay held until it may no longer take effect)
	recheck time.Duration
	// hyperV: a Hyper-V pod this sync maps (hyperVIsolated), decided
	// anew by each sync from the inbox and what HNS holds, never kept;
	// hyperVSetUp: ncproxy's Setup waits for it (only then is an endpoint
	// made: otherwise the one in place is kept, or the pod refused)
	hyperV, hyperVSetUp bool
	// neighbours: the other endpoints of the pod's namespace, when the
	// sync read them (a Hyper-V pod's VM is given them as adapters)
	neighbours     []hcn.Endpoint
	neighboursRead bool
}

// mapped is who maps a pod's host ports: the plugin's endpoint (with
// policies) and the CNI's.
type mapped struct {
	endpoint *hcn.Endpoint
	policies []hcn.PortMappingPolicy
	cni      []CNIMapping
}

// line is a log line: level, message, fields.
type line struct {
	level  logrus.Level
	msg    string
	fields logrus.Fields
}
