// Command nopplugin is the baseline the plugin's RunPodSandbox cost is
// compared against. By default it is a do-nothing NRI plugin. With --floor
// it makes only the calls a pod start cannot do without, with nothing else:
// containerd's record of the sandbox (for its namespace GUID) while HNS
// creates the endpoint, then the attach; a stop detaches and deletes it.
// That is the floor of the plugin's own cost: what the plugin adds beyond
// its I/O is the difference.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

type nop struct{}

var (
	_ stub.RunPodInterface  = nop{}
	_ stub.StopPodInterface = nop{}
	_ stub.RunPodInterface  = (*floor)(nil)
	_ stub.StopPodInterface = (*floor)(nil)
)

func (nop) RunPodSandbox(context.Context, *api.PodSandbox) error  { return nil }
func (nop) StopPodSandbox(context.Context, *api.PodSandbox) error { return nil }

// floor does a pod start's necessary I/O and nothing else.
type floor struct {
	ctr     *client.Client
	hns     *hcnsim.Client
	network *hcn.Network
	routes  []hcn.Route

	mu  sync.Mutex
	eps map[string]*hcn.Endpoint // by sandbox
}

func (f *floor) RunPodSandbox(ctx context.Context, p *api.PodSandbox) error {
	v, ok := p.Annotations[request.AnnotationPortMappings]
	if !ok {
		return nil
	}
	hostPort, containerPort, _ := strings.Cut(v, ":")
	h, _ := strconv.Atoi(hostPort)
	c, _ := strconv.Atoi(containerPort)
	type lookup struct {
		ns  hcn.GUID
		err error
	}
	got := make(chan lookup, 1)
	go func() {
		ns, err := f.namespace(ctx, p.Id)
		got <- lookup{ns, err}
	}()
	ep, err := f.hns.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "floor-" + p.Id, NetworkID: f.network.ID, Routes: f.routes,
		PortMappings: []hcn.PortMappingPolicy{{ExternalPort: uint16(h), InternalPort: uint16(c), Protocol: 6}}})
	l := <-got
	if err = errors.Join(err, l.err); err != nil {
		return err
	}
	if err := f.hns.AddNamespaceEndpoint(ctx, l.ns, ep.ID); err != nil {
		return err
	}
	ep.Namespace = l.ns
	f.mu.Lock()
	f.eps[p.Id] = ep
	f.mu.Unlock()
	return nil
}

// namespace reads the sandbox's HCN namespace from its OCI spec.
func (f *floor) namespace(ctx context.Context, id string) (hcn.GUID, error) {
	info, err := f.ctr.ContainerService().Get(namespaces.WithNamespace(ctx, "k8s.io"), id)
	if err != nil {
		return "", err
	}
	var spec struct {
		Windows struct {
			Network struct {
				NetworkNamespace string `json:"networkNamespace"`
			} `json:"network"`
		} `json:"windows"`
	}
	if err := json.Unmarshal(info.Spec.GetValue(), &spec); err != nil {
		return "", err
	}
	return hcn.ParseGUID(spec.Windows.Network.NetworkNamespace), nil
}

func (f *floor) StopPodSandbox(ctx context.Context, p *api.PodSandbox) error {
	f.mu.Lock()
	ep := f.eps[p.Id]
	delete(f.eps, p.Id)
	f.mu.Unlock()
	if ep == nil {
		return nil
	}
	// the namespace may be gone already; the endpoint is deleted either way
	_ = f.hns.RemoveNamespaceEndpoint(ctx, ep.Namespace, ep.ID)
	return f.hns.DeleteEndpoint(ctx, ep.ID)
}

func newFloor(ctx context.Context, containerd, hns, network string) (*floor, error) {
	ctr, err := client.New(containerd)
	if err != nil {
		return nil, err
	}
	sim, err := hcnsim.NewClient(hns)
	if err != nil {
		return nil, err
	}
	n, err := sim.GetNetworkByName(ctx, network)
	if errors.Is(err, hcn.ErrNotFound) {
		n, err = sim.CreateNetwork(ctx, hcn.NetworkSpec{Name: network, Type: hcn.NetworkNAT, Subnet: "172.30.0.0/16", Gateway: "172.30.0.1"})
	}
	if err != nil {
		return nil, err
	}
	routes, err := hcn.RouteLowPriority.Routes(n.Gateway, hcn.DefaultRouteMetric)
	if err != nil {
		return nil, err
	}
	return &floor{ctr: ctr, hns: sim, network: n, routes: routes, eps: map[string]*hcn.Endpoint{}}, nil
}

func main() {
	socket := flag.String("nri-socket", api.DefaultSocketPath, "NRI socket")
	floorMode := flag.Bool("floor", false, "make a pod start's necessary containerd and HNS calls, nothing else")
	containerd := flag.String("containerd", "", "containerd socket (--floor)")
	hns := flag.String("hns", "", "HNS simulator address (--floor)")
	network := flag.String("network", "nat", "HNS network (--floor)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *socket, *floorMode, *containerd, *hns, *network); err != nil && ctx.Err() == nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, socket string, floorMode bool, containerd, hns, network string) error {
	var p any = nop{}
	if floorMode {
		f, err := newFloor(ctx, containerd, hns, network)
		if err != nil {
			return err
		}
		p = f
	}
	st, err := stub.New(p, stub.WithPluginName("nop"), stub.WithPluginIdx("10"), stub.WithSocketPath(socket))
	if err != nil {
		return err
	}
	return st.Run(ctx)
}
