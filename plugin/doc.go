// Package plugin is the core of nri-hcn-portmap: it turns a pod sandbox into
// the HCN endpoint it should have, removes it when the pod goes, and
// reconciles HCN against containerd. It speaks only the project's own types
// and two seams: SandboxStore (containerd) and hcn.Manager (HNS).
//
// The data path, one step a line, with the file that holds it:
//
//	1 event      NRI RunPodSandbox, Stop/RemovePodSandbox, Synchronize   plugin/nri/nri.go
//	             containerd /tasks/start, /tasks/exit, /tasks/delete,
//	             /containers/delete (the Windows path)                   plugin/containerd/events.go
//	             periodic resync, resync after a resubscribe              resync.go
//	             which of these run (nri, containerd, auto)               plugin/sources/sources.go
//	2 operation  start: StartPod (runtime deadline, failure policy),
//	             EnsureRetrying (events), Ensure (one attempt)            start.go
//	             stop: StopPod, Remove                                    stop.go
//	             converge: Reconcile, ReconcileAll                        reconcile.go
//	3 sandbox    read from containerd through SandboxStore (pod.go):
//	             namespace GUID from the OCI spec, CRI metadata,
//	             task state                                               plugin/containerd/store.go
//	4 request    the pod's mappings, once per start                       resolve.go
//	             annotation, CRI hostPorts, merge, limits, overlaps       plugin/request/
//	             which pods may have which host ports                     plugin/admission/
//	5 conflicts  host ports held by other pods                            ports.go
//	6 endpoint   mappings -> HNS PortMapping policies                     hcn/types.go (BuildPolicies)
//	             network, create, attach, roll back; detach, delete       hcn/manager.go
//	7 HNS        the seam, one method per HNS call                        hcn/service.go
//	             time limit and metrics around every call                 hcn/wrap.go
//	             hcsshim (Windows only)                                   hcn/service_windows.go
//	             the simulator (Linux tests and demo only)                hcn/hcnsim/
//	8 seen       metrics through Observer (observe.go)                    plugin/telemetry/
//	             /healthz, /metrics, /reload                              plugin/admin/
//	             `nri-hcn-portmap status`                                 plugin/status/
//
// Concurrency: work for one sandbox is serialized (keylock.go); a start
// still retrying is cancelled by a stop of the same pod (pending.go).
// cmd/nri-hcn-portmap wires all of it (run.go) and holds one file per
// subcommand.
package plugin
