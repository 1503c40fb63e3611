package harness

import (
	"context"
	"net"
	"slices"
	"sync"

	ncproxygrpc "github.com/Microsoft/hcsshim/pkg/ncproxy/ncproxygrpc/v1"
	nodenetsvc "github.com/Microsoft/hcsshim/pkg/ncproxy/nodenetsvc/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
)

// NCProxy is hcsshim's ncproxy as the plugin meets it, on hcsshim's
// generated gRPC interfaces: the shim's side (a pod's compute agent, and
// ConfigureNetworking passed on to the NodeNetworkService at
// node_net_svc_addr, as cmd/ncproxy does) and its NetworkConfigProxy,
// whose AddNIC and DeleteNIC answer as cmd/ncproxy's (v0.15.0): the
// endpoint is found by name in HNS (here the simulator; NotFound when it
// is not), and no compute agent registered for the container is
// FailedPrecondition. The compute agent's AddEndpointToNSWithID takes the
// endpoint's namespace: an endpoint attached to none is refused.
type NCProxy struct {
	ncproxygrpc.UnimplementedNetworkConfigProxyServer
	sim    *hcnsim.Client
	srv    *grpc.Server
	Addr   string // its gRPC address (ncproxy's config "grpc")
	mu     sync.Mutex
	agents map[string]bool              // containers a shim registered
	nics   map[string]map[string]string // container: NIC ID: endpoint name
	order  map[string][]string          // container: endpoint names as added
	client nodenetsvc.NodeNetworkServiceClient
	cc     *grpc.ClientConn
}

// StartNCProxy serves ncproxy's gRPC on a loopback port, HNS being sim.
func StartNCProxy(sim *hcnsim.Client) (*NCProxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	n := &NCProxy{sim: sim, srv: grpc.NewServer(), Addr: l.Addr().String(), agents: map[string]bool{},
		nics: map[string]map[string]string{}, order: map[string][]string{}}
	ncproxygrpc.RegisterNetworkConfigProxyServer(n.srv, n)
	go func() { _ = n.srv.Serve(l) }()
	return n, nil
}

// Close stops serving.
func (n *NCProxy) Close() {
	n.srv.Stop()
	if n.cc != nil {
		_ = n.cc.Close()
	}
}

// ConfigureNetworking is the shim's external network setup of a pod
// (hcsshim internal/uvm/network.go): Setup registers the pod's compute
// agent, then asks the NodeNetworkService at addr; Teardown asks it, then
// unregisters the agent.
func (n *NCProxy) ConfigureNetworking(ctx context.Context, addr, id string, setup bool) error {
	n.mu.Lock()
	if n.client == nil {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			n.mu.Unlock()
			return err
		}
		n.cc, n.client = cc, nodenetsvc.NewNodeNetworkServiceClient(cc)
	}
	client := n.client
	typ := nodenetsvc.RequestType_Teardown
	if setup {
		n.agents[id] = true
		typ = nodenetsvc.RequestType_Setup
	}
	n.mu.Unlock()
	_, err := client.ConfigureNetworking(ctx, &nodenetsvc.ConfigureNetworkingRequest{ContainerID: id, RequestType: typ})
	if !setup {
		n.mu.Lock()
		delete(n.agents, id)
		n.mu.Unlock()
	}
	return err
}

// NICs is the endpoints container id's VM has as adapters, in the order
// they were added.
func (n *NCProxy) NICs(id string) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.order[id])
}

// AddNIC implements ncproxy's AddNIC.
func (n *NCProxy) AddNIC(ctx context.Context, req *ncproxygrpc.AddNICRequest) (*ncproxygrpc.AddNICResponse, error) {
	if req.ContainerID == "" || req.EndpointName == "" || req.NicID == "" {
		return nil, status.Errorf(codes.InvalidArgument, "received empty field in request: %+v", req)
	}
	if err := n.agent(req.ContainerID); err != nil {
		return nil, err
	}
	eps, err := n.sim.ListEndpointsByName(ctx, req.EndpointName)
	switch {
	case err != nil:
		return nil, status.Errorf(codes.Unknown, "failed to get endpoint with name `%s`: %v", req.EndpointName, err)
	case len(eps) == 0:
		return nil, status.Errorf(codes.NotFound, "no endpoint with name `%s` found", req.EndpointName)
	case eps[0].Namespace == "":
		return nil, status.Errorf(codes.Unknown, "endpoint `%s` is in no namespace", req.EndpointName)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.nics[req.ContainerID] == nil {
		n.nics[req.ContainerID] = map[string]string{}
	}
	if _, ok := n.nics[req.ContainerID][req.NicID]; ok {
		return nil, status.Errorf(codes.AlreadyExists, "NIC %s is in the VM", req.NicID)
	}
	n.nics[req.ContainerID][req.NicID] = req.EndpointName
	n.order[req.ContainerID] = append(n.order[req.ContainerID], req.EndpointName)
	return &ncproxygrpc.AddNICResponse{}, nil
}

// DeleteNIC implements ncproxy's DeleteNIC.
func (n *NCProxy) DeleteNIC(ctx context.Context, req *ncproxygrpc.DeleteNICRequest) (*ncproxygrpc.DeleteNICResponse, error) {
	if req.ContainerID == "" || req.EndpointName == "" || req.NicID == "" {
		return nil, status.Errorf(codes.InvalidArgument, "received empty field in request: %+v", req)
	}
	if err := n.agent(req.ContainerID); err != nil {
		return nil, err
	}
	if eps, err := n.sim.ListEndpointsByName(ctx, req.EndpointName); err != nil || len(eps) == 0 {
		return nil, status.Errorf(codes.NotFound, "no endpoint with name `%s` found", req.EndpointName)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.nics[req.ContainerID][req.NicID] != req.EndpointName {
		return nil, status.Errorf(codes.NotFound, "NIC %s of endpoint %s is not in the VM", req.NicID, req.EndpointName)
	}
	delete(n.nics[req.ContainerID], req.NicID)
	n.order[req.ContainerID] = slices.DeleteFunc(n.order[req.ContainerID], func(e string) bool { return e == req.EndpointName })
	return &ncproxygrpc.DeleteNICResponse{}, nil
}

func (n *NCProxy) agent(id string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.agents[id] {
		return status.Errorf(codes.FailedPrecondition, "No shim registered for namespace `%s`", id)
	}
	return nil
}

// FreeLoopbackAddr is a loopback address no program listens on now.
func FreeLoopbackAddr() (string, error) { return freeLoopbackAddr() }
