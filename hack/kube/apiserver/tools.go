//go:build tools

// Package apiserver pins kube-apiserver's dependencies; make kube builds
// k8s.io/kubernetes/cmd/kube-apiserver from this module.
package apiserver

import _ "k8s.io/kubernetes/cmd/kube-apiserver/app"
