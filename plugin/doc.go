// Package plugin is the core of nri-hcn-portmap: a controller that keeps,
// for every pod sandbox, the HCN endpoint its request asks for, and nothing
// for a sandbox that stopped. It speaks only the project's own types and
// two seams: SandboxStore (containerd) and hcn.Manager (HNS).
//
// The data path on a Windows node (stock containerd sends no NRI pod events
// there; the containerd event stream is the trigger), one step a line:
//
//	1 event     /tasks/start, /tasks/exit, /tasks/delete, /containers/delete   plugin/containerd/events.go
//	2 trigger   Started, Exited, Deleted: record what was seen, add the ID     triggers.go
//	3 queue     client-go workqueue keyed by sandbox ID, retries rate-limited  queue.go
//	4 state     the sandbox's record: request, tombstone, endpoints, ports     state.go
//	5 sync      one decision for every trigger: read, decide, converge         sync.go
//	6 sandbox   containerd's record: namespace GUID, CRI metadata, task state  plugin/containerd/store.go
//	7 request   annotation and hostPort, merged, limited, admitted             resolve.go, plugin/request/, plugin/admission/
//	8 ports     a host port held by another pod: that pod is synced first      state.go (reserve), ports.go
//	9 endpoint  keep, replace, create and attach; detach and delete            hcn/manager.go
//	10 HNS      one method per call, bounded and capped; hcsshim or simulator  hcn/service.go, hcn/wrap.go, hcn/service_windows.go
//	11 errors   final or retried, metric class, owner's reason, log: one table errors.go
//	12 seen     metrics, Kubernetes events and condition, status                observe.go, report.go, plugin/telemetry/, plugin/kube/
//
// On Linux (and with a containerd that calls NRI plugins) the runtime's
// requests are triggers too: RunPodSandbox is StartPod, which waits for the
// sandbox's sync within its deadline and answers with its outcome;
// StopPodSandbox and RemovePodSandbox are StopPod and RemovePod; Synchronize
// is Reconcile (plugin/nri/nri.go). The resync (resync.go) is Reconcile over
// what containerd lists. Which source runs is plugin/sources/sources.go.
//
// Concurrency: the workqueue never gives one sandbox to two workers; the
// state has one lock; nothing else is shared. cmd/nri-hcn-portmap wires it
// (run.go) and holds one file per subcommand.
package plugin
