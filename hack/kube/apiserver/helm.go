//go:build tools

package apiserver

// helm is built from this module too (make helm), not with go install
// helm@version: helm v3.22.0 requires k8s.io/* v0.37.0, which this module
// lifts to kube-apiserver's v0.37.2, so the Kubernetes packages helm shares
// with kube-apiserver and kubectl compile once. Measured on 2 cores, empty
// build cache: helm alone 169 s, helm after kube-apiserver and kubectl 26 s.
import _ "helm.sh/helm/v3/cmd/helm"
