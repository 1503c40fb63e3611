// Command nopplugin is the baseline the plugin's costs are compared
// against. By default it is a do-nothing NRI plugin. With --floor it makes
// only the calls a pod start cannot do without, in the order they depend on
// each other, with nothing else: containerd's record of the sandbox (for its
// namespace GUID and the pod's DNS: its own, else the CNI's result), for a
// pod whose record names no DNS HNS's namespace and its endpoints (the
// CNI's, whose DNS the pod's interface got), the node's own sockets on the
// host port (a port a program holds is never mapped), then HNS's create, then the
// attach; a stop detaches and deletes. With --events it is the same floor on containerd's event stream
// (the Windows path): /tasks/start does those three calls, /tasks/exit the
// two of a stop. That is the floor of the plugin's own cost: what the plugin
// adds beyond its I/O is the difference.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	apievents "github.com/containerd/containerd/api/events"
	"github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/containerd/typeurl/v2"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/hostsockets"
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
	if _, ok := p.Annotations[request.AnnotationPortMappings]; !ok {
		return nil
	}
	sb, err := f.sandbox(ctx, p.Id)
	if err != nil {
		return err
	}
	return f.createAttach(ctx, p.Id, "floor-"+p.Id, sb)
}

// createAttach is the HNS half of a start: the lookup a pod whose record
// names no DNS needs, the create, the attach.
func (f *floor) createAttach(ctx context.Context, id, name string, sb sandbox) error {
	ms, err := request.ParsePortMappings(sb.mapping, request.Limits{})
	if err != nil {
		return err
	}
	policies := request.BuildPolicies(ms, request.PolicyOptions{LocalRoutedVIP: true})
	dns := sb.dns
	if dns.IsZero() {
		n, err := f.hns.GetNamespace(ctx, sb.ns)
		if err != nil {
			return err
		}
		var eps []hcn.Endpoint
		for _, id := range n.Endpoints {
			ep, err := f.hns.GetEndpoint(ctx, id)
			if err != nil {
				return err
			}
			eps = append(eps, *ep)
		}
		dns = hcn.NeighbourDNS(eps)
	}
	// the node's own sockets on the port: a port a program holds is never
	// mapped (issue 56)
	if _, err := (hostsockets.OS{Probe: true}).On(ctx, hostsockets.PortsOf(policies)); err != nil {
		return err
	}
	ns := sb.ns
	ep, err := f.hns.CreateEndpoint(ctx, hcn.EndpointSpec{Name: name, NetworkID: f.network.ID, Routes: f.routes, DNS: dns,
		PortMappings: policies})
	if err != nil {
		return err
	}
	if err := f.hns.AddNamespaceEndpoint(ctx, ns, ep.ID); err != nil {
		return err
	}
	ep.Namespace = ns
	f.mu.Lock()
	f.eps[id] = ep
	f.mu.Unlock()
	return nil
}

// sandbox is what a start reads of the sandbox in containerd.
type sandbox struct {
	ns      hcn.GUID
	mapping string  // the port mappings annotation
	dns     hcn.DNS // the pod's own, else its CNI's result's; zero: neither
}

// sandbox reads the sandbox's HCN namespace from its OCI spec, and the port
// mappings annotation and DNS from its CRI metadata.
func (f *floor) sandbox(ctx context.Context, id string) (sandbox, error) {
	info, err := f.ctr.ContainerService().Get(namespaces.WithNamespace(ctx, "k8s.io"), id)
	if err != nil {
		return sandbox{}, err
	}
	var spec struct {
		Windows struct {
			Network struct {
				NetworkNamespace string `json:"networkNamespace"`
			} `json:"network"`
		} `json:"windows"`
	}
	if err := json.Unmarshal(info.Spec.GetValue(), &spec); err != nil {
		return sandbox{}, err
	}
	sb := sandbox{ns: hcn.ParseGUID(spec.Windows.Network.NetworkNamespace)}
	if ext, ok := info.Extensions[request.ExtensionMetadata]; ok {
		md, err := request.DecodeCRIMetadata(ext.GetValue())
		if err != nil {
			return sandbox{}, err
		}
		sb.mapping, sb.dns = md.Annotations[request.AnnotationPortMappings], md.DNS
		if sb.dns.IsZero() {
			sb.dns = md.CNIDNS
		}
	}
	return sb, nil
}

func (f *floor) StopPodSandbox(ctx context.Context, p *api.PodSandbox) error {
	return f.stop(ctx, p.Id)
}

func (f *floor) stop(ctx context.Context, id string) error {
	f.mu.Lock()
	ep := f.eps[id]
	delete(f.eps, id)
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
	routes, err := hcn.RouteLowPriority.Routes(n.Gateway, config.DefaultRouteMetric)
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
	events := flag.Bool("events", false, "the floor on containerd's event stream instead of NRI")
	nodeNetAddr := flag.String("node-network-service", "", "the floor of a Hyper-V pod's setup: serve ncproxy's NodeNetworkService here")
	ncproxy := flag.String("ncproxy", "", "ncproxy's gRPC address (--node-network-service)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if *nodeNetAddr != "" {
		var f *floor
		if f, err = newFloor(ctx, *containerd, *hns, *network); err == nil {
			err = serveNodeNet(ctx, f, *nodeNetAddr, *ncproxy)
		}
	} else if *events {
		err = runEvents(ctx, *containerd, *hns, *network)
	} else {
		err = run(ctx, *socket, *floorMode, *containerd, *hns, *network)
	}
	if err != nil && ctx.Err() == nil {
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

// runEvents is the floor on containerd's event stream: a start is the
// sandbox's record, the create and the attach; an exit the detach and the
// delete. Endpoints are named as the plugin names them, so the benchmark's
// watcher sees them alike.
func runEvents(ctx context.Context, containerd, hns, network string) error {
	f, err := newFloor(ctx, containerd, hns, network)
	if err != nil {
		return err
	}
	filter := func(topic string) string { return fmt.Sprintf("namespace==%q,topic==%q", "k8s.io", topic) }
	ch, errs := f.ctr.Subscribe(ctx, filter("/tasks/start"), filter("/tasks/exit"))
	fmt.Println("subscribed") // the benchmark waits for this line before it publishes
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			return err
		case env := <-ch:
			ev, err := typeurl.UnmarshalAny(env.Event)
			if err != nil {
				continue
			}
			// each event on its own, as the plugin's workers take
			// different sandboxes at once
			switch e := ev.(type) {
			case *apievents.TaskStart:
				go func() {
					sb, err := f.sandbox(ctx, e.ContainerID)
					if err != nil || sb.mapping == "" {
						return
					}
					if err := f.createAttach(ctx, e.ContainerID, "nri-hcn-portmap-"+e.ContainerID, sb); err != nil {
						fmt.Fprintln(os.Stderr, "start:", err)
					}
				}()
			case *apievents.TaskExit:
				go func() {
					if err := f.stop(ctx, e.ContainerID); err != nil {
						fmt.Fprintln(os.Stderr, "stop:", err)
					}
				}()
			}
		}
	}
}
