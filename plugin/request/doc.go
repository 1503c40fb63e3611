// Package request works out what a pod asks for: the port mappings of its
// hcn.nri.io/port-mappings annotation (annotation.go), its Kubernetes
// hostPorts from containerd's CRI sandbox metadata (cri.go), the two merged
// (merge.go), held to the per-pod limits (limits.go) and checked for
// overlaps (overlap.go). Everything here is pure and linear in its input:
// it runs on the NRI path, where every request of the node waits.
package request
