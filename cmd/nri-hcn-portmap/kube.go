package main

import (
	"cmp"
	"fmt"
	"os"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/kube"
)

// newKubeReporter builds the client (nothing is dialled yet: start-up never
// waits for the API server) and the reporter.
func newKubeReporter(cfg config.Kubernetes, metrics kube.Metrics, log *logrus.Entry) (*kube.Reporter, error) {
	node := cmp.Or(cfg.NodeName, os.Getenv("NODE_NAME"))
	if node == "" {
		return nil, fmt.Errorf("kubernetes.enabled: kubernetes.node_name is empty and NODE_NAME is not set (the DaemonSet passes it from the downward API)")
	}
	var (
		rc  *rest.Config
		err error
	)
	if cfg.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes.kubeconfig = %q: %w", cfg.Kubeconfig, err)
	}
	rc.UserAgent = "nri-hcn-portmap/" + version
	api, err := kube.NewRESTAPI(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return kube.New(kube.Options{API: api, Node: node, QueueSize: cfg.QueueSize, Metrics: metrics,
		Log: log.WithField("component", "kubernetes")}), nil
}
