package main

import (
	"cmp"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/kube"
)

// newKubeAPI builds the API server's client from [kubernetes] (nothing is
// dialled yet: start-up never waits for the API server).
func newKubeAPI(cfg config.Kubernetes) (*kube.RESTAPI, error) {
	var (
		rc  *rest.Config
		err error
	)
	if cfg.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	} else {
		rc, err = inClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes.kubeconfig = %q: %w", cfg.Kubeconfig, err)
	}
	rc.UserAgent = "nri-hcn-portmap/" + version
	api, err := kube.NewRESTAPI(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return api, nil
}

// newKubeReporter is the reporter to pods of this node.
func newKubeReporter(cfg config.Kubernetes, api *kube.RESTAPI, metrics kube.Metrics, log *logrus.Entry) (*kube.Reporter, error) {
	node := cmp.Or(cfg.NodeName, os.Getenv("NODE_NAME"))
	if node == "" {
		return nil, fmt.Errorf("kubernetes.enabled: kubernetes.node_name is empty and NODE_NAME is not set (the DaemonSet passes it from the downward API)")
	}
	return kube.New(kube.Options{API: api, Node: node, QueueSize: cfg.QueueSize, Metrics: metrics,
		Log: log.WithField("component", "kubernetes"), RetryMin: config.APIRetryMin, RetryMax: config.APIRetryMax}), nil
}

// inClusterConfig is client-go's in-cluster configuration, or, where a
// HostProcess container lacks the bind filter (Windows Server 2019, older
// containerd) and the service account's files are only under
// $CONTAINER_SANDBOX_MOUNT_POINT, the same read from there, as Calico's and
// flannel's HostProcess scripts read it. The token is read from its file
// at each request (BearerTokenFile), so rotation works as in-cluster.
func inClusterConfig() (*rest.Config, error) {
	rc, err := rest.InClusterConfig()
	root := os.Getenv("CONTAINER_SANDBOX_MOUNT_POINT")
	if err == nil || root == "" {
		return rc, err
	}
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, err
	}
	dir := filepath.Join(root, "var", "run", "secrets", "kubernetes.io", "serviceaccount")
	token := filepath.Join(dir, "token")
	if _, terr := os.Stat(token); terr != nil {
		return nil, fmt.Errorf("%w; nor under CONTAINER_SANDBOX_MOUNT_POINT: %w", err, terr)
	}
	return &rest.Config{Host: "https://" + net.JoinHostPort(host, port), BearerTokenFile: token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: filepath.Join(dir, "ca.crt")}}, nil
}
