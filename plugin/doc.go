// Package plugin is the core of nri-hcn-portmap: a controller that keeps,
// for every pod sandbox, the HCN endpoint its request asks for, and nothing
// for a sandbox that stopped. It speaks only the project's own types and
// two seams: SandboxStore (containerd) and hcn.Manager (HNS).
//
// The data path on a Windows node (stock containerd sends no NRI pod events
// there; the containerd event stream is the trigger), one step a line:
//
//	1 event     /tasks/start, /tasks/exit, /tasks/delete, /containers/delete   plugin/containerd/events.go
//	2 trigger   Started, Exited, Deleted: write what was seen, add the ID      triggers.go, state.go (trigger)
//	3 worker    client-go workqueue keyed by sandbox ID; one snapshot, one      worker.go (process), state.go
//	            sync, one commit, said once; retries are the queue's           (snapshot, commit)
//	4 sync      reads the facts decide asks for, then applies its plan          sync.go (sync, read, apply)
//	5 sandbox   containerd's record: namespace GUID, CRI metadata, task state  plugin/containerd/store.go
//	6 request   request.Resolve, once, as the record is read: annotation and    plugin/request/ (resolve.go)
//	            hostPort, merged, limited; DNS
//	7 decide    a function of values (the snapshot, the facts, the inputs as   decide.go, plan.go, plugin/admission/
//	            the sync began): admission as a step (what the endpoint in
//	            place does not hold, by the policy and labels as typed
//	            values), then every step: the claim, HNS's (hcn.Diff, Removal)
//	8 claim     the host ports checked and reserved in one step; one another   state.go (claim: the port index)
//	            pod holds makes this one wait for that pod's own sync
//	9 endpoint  the plan's HNS steps, each as it expects: keep, delete,         hcn/diff.go (the plan), hcn/manager.go (Apply)
//	            create, attach and its rollback
//	10 HNS      one method per call, bounded and capped; hcsshim or simulator  hcn/service.go, hcn/calls.go, hcn/service_windows.go
//	11 errors   what an HNS error is, and what it means to each call; final    hcn/errors.go (kinds, readings), errors.go
//	            or retried, metric, reason, log
//	12 commit   one write of what is known; a sync whose inputs changed        worker.go (process), state.go (commit)
//	            before it is decided again
//	13 seen     metrics, Kubernetes events and condition, status                worker.go (tell), report.go, plugin/telemetry/, plugin/kube/
//
// On Linux (and with a containerd that calls NRI plugins) the runtime's
// requests are triggers too: RunPodSandbox is StartPod, which waits for the
// sandbox's sync within its deadline and answers with its outcome;
// StopPodSandbox and RemovePodSandbox are StopPod and RemovePod; Synchronize
// is Reconcile (plugin/nri/nri.go). The listings (HNS's at start-up,
// Synchronize's, containerd's for the resync) are resync.go's: each becomes
// one sighting per sandbox. Which source runs is plugin/sources/sources.go.
//
// Concurrency: the workqueue never gives one sandbox to two workers; the
// state has one lock; the policy and the labels are values swapped whole
// (atomic pointers), counted by inputsGen. Each field of the state has one
// writer (the table in state.go): triggers write what they saw, the worker
// commits what its sync found. The files point down (no file uses a file
// that uses it back: hack/usegraph's test): values.go, pod.go and
// observe.go at the bottom; state.go, errors.go; plan.go, decide.go;
// core.go, report.go, sync.go; worker.go; triggers.go, resync.go,
// options.go at the top. cmd/nri-hcn-portmap wires it (run.go) and holds
// one file per subcommand.
package plugin
