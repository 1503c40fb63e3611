package main

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/Microsoft/go-winio/pkg/guid"
	ncproxygrpc "github.com/Microsoft/hcsshim/pkg/ncproxy/ncproxygrpc/v1"
	nodenetsvc "github.com/Microsoft/hcsshim/pkg/ncproxy/nodenetsvc/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// nodeNet is the floor of a Hyper-V pod's setup through ncproxy: the
// sandbox's record, the namespace's endpoints (the VM's adapters), the
// node's sockets, the create, the attach, then AddNIC for each endpoint,
// the CNI's first; the teardown deletes the adapters, then the endpoint.
type nodeNet struct {
	nodenetsvc.UnimplementedNodeNetworkServiceServer
	f   *floor
	ncp ncproxygrpc.NetworkConfigProxyClient
}

func (n *nodeNet) ConfigureNetworking(ctx context.Context, req *nodenetsvc.ConfigureNetworkingRequest) (*nodenetsvc.ConfigureNetworkingResponse, error) {
	id := req.ContainerID
	name := "nri-hcn-portmap-" + id
	if req.RequestType == nodenetsvc.RequestType_Teardown {
		n.f.mu.Lock()
		ep := n.f.eps[id]
		n.f.mu.Unlock()
		if ep != nil {
			if _, err := n.ncp.DeleteNIC(ctx, &ncproxygrpc.DeleteNICRequest{ContainerID: id, NicID: nicID(id, ep.ID), EndpointName: ep.Name}); err != nil {
				return nil, err
			}
		}
		return &nodenetsvc.ConfigureNetworkingResponse{}, n.f.stop(ctx, id)
	}
	sb, err := n.f.sandbox(ctx, id)
	if err != nil {
		return nil, err
	}
	ns, err := n.f.hns.GetNamespace(ctx, sb.ns)
	if err != nil {
		return nil, err
	}
	var nics []hcn.Endpoint
	for _, epID := range ns.Endpoints {
		ep, err := n.f.hns.GetEndpoint(ctx, epID)
		if err != nil {
			return nil, err
		}
		nics = append(nics, *ep)
	}
	if sb.dns.IsZero() {
		sb.dns = hcn.NeighbourDNS(nics)
	}
	if err := n.f.createAttach(ctx, id, name, sb); err != nil {
		return nil, err
	}
	n.f.mu.Lock()
	nics = append(nics, *n.f.eps[id])
	n.f.mu.Unlock()
	for _, ep := range nics {
		if _, err := n.ncp.AddNIC(ctx, &ncproxygrpc.AddNICRequest{ContainerID: id, NicID: nicID(id, ep.ID), EndpointName: ep.Name}); err != nil {
			return nil, err
		}
	}
	return &nodenetsvc.ConfigureNetworkingResponse{}, nil
}

func nicID(id, ep string) string {
	g, _ := guid.NewV5(guid.GUID{}, []byte(id+"/"+ep))
	return g.String()
}

// serveNodeNet serves the floor's NodeNetworkService on addr until ctx
// ends, adding adapters through ncproxy at ncproxyAddr.
func serveNodeNet(ctx context.Context, f *floor, addr, ncproxyAddr string) error {
	cc, err := grpc.NewClient(ncproxyAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	nodenetsvc.RegisterNodeNetworkServiceServer(srv, &nodeNet{f: f, ncp: ncproxygrpc.NewNetworkConfigProxyClient(cc)})
	go func() {
		<-ctx.Done()
		srv.Stop()
	}()
	fmt.Println("serving") // the benchmark waits for this line
	if err := srv.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}
