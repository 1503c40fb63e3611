// Package request works out what a pod asks for: the port mappings of its
// hcn.nri.io/port-mappings annotation (annotation.go), its Kubernetes
// hostPorts from containerd's CRI sandbox metadata (cri.go), and the
// mapping itself (mapping.go): the two merged, held to the per-pod limits,
// checked for overlaps, and turned into HNS policies. Everything here is
// pure and linear in its input:
// it runs on the NRI path, where every request of the node waits.
package request
