//go:build tools

// Package apiserver pins kube-apiserver's, kubectl's and helm's (helm.go) dependencies; make
// kube builds k8s.io/kubernetes/cmd/kube-apiserver and cmd/kubectl from
// this module (kubectl runs the README's and NOTES.txt's commands as an
// operator would, and renders the kustomize overlays).
package apiserver

import (
	_ "k8s.io/component-base/cli"
	_ "k8s.io/kubectl/pkg/cmd"
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
)
