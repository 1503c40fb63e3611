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
//	4 sync      decide, a function of values (the snapshot, the facts read     sync.go
//	            for it, the policy and labels as of its start), asks for a
//	            fact or plans the steps; apply takes them
//	5 sandbox   containerd's record: namespace GUID, CRI metadata, task state  plugin/containerd/store.go
//	6 request   request.Resolve: annotation and hostPort, merged, limited,      plugin/request/ (resolve.go), plugin/admission/
//	            what the endpoint in place does not hold admitted; DNS
//	7 claim     the host ports checked and reserved in one step; one another   state.go (claim: the port index)
//	            pod holds makes this one wait for that pod's own sync
//	8 endpoint  keep, replace, create and attach; detach and delete            hcn/manager.go
//	9 HNS       one method per call, bounded and capped; hcsshim or simulator  hcn/service.go, hcn/calls.go, hcn/service_windows.go
//	10 errors   what an HNS error is; final or retried, metric, reason, log    hcn/errors.go, errors.go
//	11 seen     metrics, Kubernetes events and condition, status                observe.go, report.go, plugin/telemetry/, plugin/kube/
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
// state has one lock; nothing else is shared. Each field of the state has
// one writer (the table in state.go): triggers write what they saw, the
// worker commits what its sync found. cmd/nri-hcn-portmap wires it
// (run.go) and holds one file per subcommand.
package plugin
