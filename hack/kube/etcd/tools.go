//go:build tools

// Package etcd pins etcd's dependencies; make kube builds
// go.etcd.io/etcd/server/v3 (the etcd binary) from this module.
package etcd

import _ "go.etcd.io/etcd/server/v3/etcdmain"
