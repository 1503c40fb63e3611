// Package nodenet serves hcsshim's NodeNetworkService to ncproxy: the one
// supported way to give a Hyper-V isolated pod's utility VM a network
// adapter after the CNI ran. With NCProxyAddr in the runtime's options the
// shim asks ncproxy to set the pod's network up (ConfigureNetworking,
// Setup) before the VM uses it, and adds none of the namespace's endpoints
// itself; ncproxy asks this service, which has the controller decide and
// build the pod's endpoint (plugin.Core.SetUpHyperV) and then adds every
// endpoint of the namespace to the VM through ncproxy's AddNIC, the CNI's
// first. Teardown deletes those adapters, then has the controller remove
// the endpoint and give its ports back.
//
// Read in hcsshim v0.15.0: internal/uvm/network.go (externalNetworkSetup:
// AddNetNSByID, RegisterComputeAgent, then ConfigureNetworking),
// cmd/ncproxy/ncproxy.go (ConfigureNetworking forwarded to the
// NodeNetworkService; AddNIC and DeleteNIC find the endpoint by name and
// reach the shim's compute agent), internal/tools/networkagent (hcsshim's
// own NodeNetworkService: every endpoint of the namespace added as a NIC).
package nodenet

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/Microsoft/go-winio/pkg/guid"
	ncproxygrpc "github.com/Microsoft/hcsshim/pkg/ncproxy/ncproxygrpc/v1"
	nodenetsvc "github.com/Microsoft/hcsshim/pkg/ncproxy/nodenetsvc/v1"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
)

// Sandboxes is the controller (plugin.Core).
type Sandboxes interface {
	SetUpHyperV(ctx context.Context, id string) (plugin.HyperVNetwork, error)
	HyperVNICs(ctx context.Context, id string) ([]plugin.NIC, error)
	TearDownHyperV(ctx context.Context, id string)
}

// NCProxy is what the service asks of ncproxy (its generated client).
type NCProxy interface {
	AddNIC(ctx context.Context, in *ncproxygrpc.AddNICRequest, opts ...grpc.CallOption) (*ncproxygrpc.AddNICResponse, error)
	DeleteNIC(ctx context.Context, in *ncproxygrpc.DeleteNICRequest, opts ...grpc.CallOption) (*ncproxygrpc.DeleteNICResponse, error)
}

var (
	_ Sandboxes                           = (*plugin.Core)(nil)
	_ NCProxy                             = ncproxygrpc.NetworkConfigProxyClient(nil)
	_ nodenetsvc.NodeNetworkServiceServer = (*Service)(nil)
)

// Service is the NodeNetworkService.
type Service struct {
	nodenetsvc.UnimplementedNodeNetworkServiceServer // ConfigureContainerNetworking: not served (ncproxy's v1 path never asks)
	pods                                             Sandboxes
	ncproxy                                          NCProxy
	log                                              *logrus.Entry
}

// New returns the service.
func New(pods Sandboxes, ncproxy NCProxy, log *logrus.Entry) *Service {
	return &Service{pods: pods, ncproxy: ncproxy, log: log.WithField("source", "ncproxy")}
}

// ConfigureNetworking is ncproxy's Setup or Teardown of the pod sandbox
// container_id's network; it answers once done.
func (s *Service) ConfigureNetworking(ctx context.Context, req *nodenetsvc.ConfigureNetworkingRequest) (*nodenetsvc.ConfigureNetworkingResponse, error) {
	id := req.GetContainerID()
	if id == "" {
		return nil, status.Error(codes.InvalidArgument, "container_id is empty")
	}
	var err error
	switch req.GetRequestType() {
	case nodenetsvc.RequestType_Setup:
		err = s.setUp(ctx, id)
	case nodenetsvc.RequestType_Teardown:
		err = s.tearDown(ctx, id)
	default:
		return nil, status.Errorf(codes.InvalidArgument, "sandbox %s: request_type %d is neither Setup nor Teardown", id, req.GetRequestType())
	}
	if err != nil {
		return nil, status.Error(codeOf(err), err.Error())
	}
	return &nodenetsvc.ConfigureNetworkingResponse{}, nil
}

// setUp decides and builds the pod's endpoint, then gives its VM every
// endpoint of its namespace, the CNI's first; an adapter ncproxy does not
// add undoes the others and the endpoint, and fails the start.
func (s *Service) setUp(ctx context.Context, id string) error {
	net, err := s.pods.SetUpHyperV(ctx, id)
	if err != nil {
		return fmt.Errorf("sandbox %s: host ports not set up, so neither is its network: %w", id, err)
	}
	log := s.log.WithField("sandbox", id)
	var added []plugin.NIC
	for _, nic := range net.NICs {
		_, err := s.ncproxy.AddNIC(ctx, &ncproxygrpc.AddNICRequest{ContainerID: id, NicID: NICID(id, nic.EndpointID), EndpointName: nic.EndpointName})
		if err != nil {
			err = fmt.Errorf("sandbox %s: ncproxy's AddNIC of endpoint %s: %w; what was added is undone", id, nic.EndpointName, err)
			undo := s.deleteNICs(ctx, id, added)
			s.pods.TearDownHyperV(ctx, id)
			return errors.Join(err, undo)
		}
		added = append(added, nic)
	}
	fields := logrus.Fields{"nics": len(added)}
	if net.Refused != nil {
		log.WithFields(fields).WithError(net.Refused).Info("Hyper-V pod's network set up without host ports")
		return nil
	}
	log.WithFields(fields).Info("Hyper-V pod's network set up")
	return nil
}

// tearDown takes the adapters out of the VM, ours first, then has the
// endpoint removed; an adapter already gone (a repeated or late call, a VM
// that is gone) is no failure.
func (s *Service) tearDown(ctx context.Context, id string) error {
	nics, err := s.pods.HyperVNICs(ctx, id)
	if err != nil {
		return fmt.Errorf("sandbox %s: reading its network: %w", id, err)
	}
	if err := s.deleteNICs(ctx, id, nics); err != nil {
		return err
	}
	s.pods.TearDownHyperV(ctx, id)
	s.log.WithField("sandbox", id).Info("Hyper-V pod's network torn down")
	return nil
}

// deleteNICs deletes nics from the sandbox's VM in the reverse of their
// order, every one tried; the errors that are not "already gone" are
// returned together.
func (s *Service) deleteNICs(ctx context.Context, id string, nics []plugin.NIC) error {
	var errs []error
	for i := len(nics) - 1; i >= 0; i-- {
		nic := nics[i]
		_, err := s.ncproxy.DeleteNIC(ctx, &ncproxygrpc.DeleteNICRequest{ContainerID: id, NicID: NICID(id, nic.EndpointID), EndpointName: nic.EndpointName})
		if err != nil && !gone(err) {
			errs = append(errs, fmt.Errorf("sandbox %s: ncproxy's DeleteNIC of endpoint %s: %w", id, nic.EndpointName, err))
		}
	}
	return errors.Join(errs...)
}

// gone: ncproxy has no such endpoint (NotFound) or no shim for the
// sandbox any more (FailedPrecondition: its VM is gone).
func gone(err error) bool {
	switch status.Code(err) {
	case codes.NotFound, codes.FailedPrecondition:
		return true
	}
	return false
}

// codeOf is the gRPC code ncproxy passes on to the shim for err.
func codeOf(err error) codes.Code {
	if errors.Is(err, plugin.ErrSandboxNotFound) {
		return codes.NotFound
	}
	return codes.Unavailable
}

// PingNodeNetworkService answers ncproxy's ping.
func (s *Service) PingNodeNetworkService(_ context.Context, req *nodenetsvc.PingNodeNetworkServiceRequest) (*nodenetsvc.PingNodeNetworkServiceResponse, error) {
	return &nodenetsvc.PingNodeNetworkServiceResponse{PingResponseMessage: req.GetPingRequestMessage()}, nil
}

// GetHostLocalIpAddress: the plugin gives a pod no host-local address.
func (s *Service) GetHostLocalIpAddress(context.Context, *nodenetsvc.GetHostLocalIpAddressRequest) (*nodenetsvc.GetHostLocalIpAddressResponse, error) { //nolint:revive // the generated name
	return &nodenetsvc.GetHostLocalIpAddressResponse{}, nil
}

// nicNamespace names the NIC IDs this plugin makes (a v5 GUID space).
var nicNamespace = guid.GUID{Data1: 0x6e7269, Data2: 0x6863, Data3: 0x6e70, Data4: [8]byte{'p', 'o', 'r', 't', 'm', 'a', 'p', 0}}

// NICID is the adapter ID of endpoint endpointID in sandbox id's VM: the
// same on every call, so a Teardown after a restart deletes what the Setup
// added without a record of it.
func NICID(id, endpointID string) string {
	g, err := guid.NewV5(nicNamespace, []byte(id+"/"+endpointID))
	if err != nil { // NewV5 hashes; it fails on nothing
		panic(err)
	}
	return g.String()
}

// Serve serves svc on l until ctx ends.
func Serve(ctx context.Context, l net.Listener, svc *Service) error {
	srv := grpc.NewServer()
	nodenetsvc.RegisterNodeNetworkServiceServer(srv, svc)
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("NodeNetworkService on %s: %w", l.Addr(), err)
	}
	return nil
}

// Dial returns ncproxy's client at addr (a loopback IP and port): gRPC
// connects on the first call, and again after ncproxy restarts.
func Dial(addr string) (ncproxygrpc.NetworkConfigProxyClient, func() error, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("ncproxy at %s: %w", addr, err)
	}
	return ncproxygrpc.NewNetworkConfigProxyClient(cc), cc.Close, nil
}
