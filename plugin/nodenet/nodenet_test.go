package nodenet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	ncproxygrpc "github.com/Microsoft/hcsshim/pkg/ncproxy/ncproxygrpc/v1"
	nodenetsvc "github.com/Microsoft/hcsshim/pkg/ncproxy/nodenetsvc/v1"
	"github.com/sirupsen/logrus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
)

// fakeNCProxy is ncproxy's gRPC side as hcsshim generates it: a VM's
// adapters by NIC ID, AddNIC refusing a NIC ID twice and DeleteNIC one it
// does not have (NotFound, as the compute agent does for an endpoint it
// cannot find); failAdd fails the AddNIC of that endpoint.
type fakeNCProxy struct {
	ncproxygrpc.UnimplementedNetworkConfigProxyServer
	mu      sync.Mutex
	nics    map[string][]string // container ID: endpoint names, in the order added
	ids     map[string]string   // NIC ID: endpoint name
	failAdd string
	failDel codes.Code
	calls   []string
}

func (f *fakeNCProxy) AddNIC(_ context.Context, req *ncproxygrpc.AddNICRequest) (*ncproxygrpc.AddNICResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "add "+req.EndpointName)
	switch {
	case req.ContainerID == "" || req.EndpointName == "" || req.NicID == "":
		return nil, status.Errorf(codes.InvalidArgument, "received empty field in request: %+v", req)
	case req.EndpointName == f.failAdd:
		return nil, status.Errorf(codes.Internal, "failed to add endpoint %s", req.EndpointName)
	case f.ids[req.NicID] != "":
		return nil, status.Errorf(codes.AlreadyExists, "NIC %s exists", req.NicID)
	}
	f.ids[req.NicID] = req.EndpointName
	f.nics[req.ContainerID] = append(f.nics[req.ContainerID], req.EndpointName)
	return &ncproxygrpc.AddNICResponse{}, nil
}

func (f *fakeNCProxy) DeleteNIC(_ context.Context, req *ncproxygrpc.DeleteNICRequest) (*ncproxygrpc.DeleteNICResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, "delete "+req.EndpointName)
	if f.failDel != codes.OK {
		return nil, status.Errorf(f.failDel, "DeleteNIC %s", req.EndpointName)
	}
	if f.ids[req.NicID] != req.EndpointName {
		return nil, status.Errorf(codes.NotFound, "no endpoint with name `%s` found", req.EndpointName)
	}
	delete(f.ids, req.NicID)
	f.nics[req.ContainerID] = slices.DeleteFunc(f.nics[req.ContainerID], func(n string) bool { return n == req.EndpointName })
	return &ncproxygrpc.DeleteNICResponse{}, nil
}

func (f *fakeNCProxy) state() (map[string][]string, []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string][]string{}
	for k, v := range f.nics {
		if len(v) > 0 {
			out[k] = slices.Clone(v)
		}
	}
	return out, slices.Clone(f.calls)
}

// fakePods is the controller as the service sees it: the sandbox's
// network as set (refused, or failing), and its teardowns.
type fakePods struct {
	mu        sync.Mutex
	net       plugin.HyperVNetwork
	err       error
	built     bool // our endpoint in place (after a setup, until a teardown)
	teardowns int
}

func (p *fakePods) SetUpHyperV(context.Context, string) (plugin.HyperVNetwork, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return plugin.HyperVNetwork{}, p.err
	}
	p.built = slices.ContainsFunc(p.net.NICs, func(n plugin.NIC) bool { return n.Ours })
	return p.net, nil
}

func (p *fakePods) HyperVNICs(context.Context, string) ([]plugin.NIC, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(p.net.NICs), func(n plugin.NIC) bool { return n.Ours && !p.built }), nil
}

func (p *fakePods) TearDownHyperV(context.Context, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.built = false
	p.teardowns++
}

var (
	cniNIC  = plugin.NIC{EndpointID: "C1", EndpointName: "cbr0_s"}
	ourNIC  = plugin.NIC{EndpointID: "E1", EndpointName: "nri-hcn-portmap-s", Ours: true}
	mapped  = plugin.HyperVNetwork{NICs: []plugin.NIC{cniNIC, ourNIC}}
	refused = plugin.HyperVNetwork{NICs: []plugin.NIC{cniNIC}, Refused: fmt.Errorf("pod x: %w", plugin.ErrInvalidPod)}
)

// serve runs the fake ncproxy and the service, each on a loopback
// listener of its own, and returns ncproxy's client of the service.
func serve(t *testing.T, pods *fakePods, ncp *fakeNCProxy) nodenetsvc.NodeNetworkServiceClient {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ncp.nics, ncp.ids = map[string][]string{}, map[string]string{}
	nl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nsrv := grpc.NewServer()
	ncproxygrpc.RegisterNetworkConfigProxyServer(nsrv, ncp)
	go func() { _ = nsrv.Serve(nl) }()
	t.Cleanup(nsrv.Stop)
	client, closeClient, err := Dial(nl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closeClient() })
	log := logrus.New()
	log.SetOutput(io.Discard)
	sl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, sl, New(pods, client, logrus.NewEntry(log))) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	cc, err := grpc.NewClient(sl.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return nodenetsvc.NewNodeNetworkServiceClient(cc)
}

func configure(c nodenetsvc.NodeNetworkServiceClient, id string, typ nodenetsvc.RequestType) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := c.ConfigureNetworking(ctx, &nodenetsvc.ConfigureNetworkingRequest{ContainerID: id, RequestType: typ})
	return err
}

func TestConfigureNetworking(t *testing.T) {
	const (
		setup    = nodenetsvc.RequestType_Setup
		teardown = nodenetsvc.RequestType_Teardown
	)
	tests := []struct {
		name      string
		pods      *fakePods
		ncp       *fakeNCProxy
		requests  []nodenetsvc.RequestType
		code      codes.Code          // the last request's
		nics      map[string][]string // the VM's adapters after the requests
		calls     []string            // ncproxy's, in order
		teardowns int
	}{
		{"a setup adds the CNI's adapter, then ours", &fakePods{net: mapped}, &fakeNCProxy{}, []nodenetsvc.RequestType{setup}, codes.OK,
			map[string][]string{"s": {"cbr0_s", "nri-hcn-portmap-s"}}, []string{"add cbr0_s", "add nri-hcn-portmap-s"}, 0},
		{"a refused pod gets the CNI's adapter alone", &fakePods{net: refused}, &fakeNCProxy{}, []nodenetsvc.RequestType{setup}, codes.OK,
			map[string][]string{"s": {"cbr0_s"}}, []string{"add cbr0_s"}, 0},
		{"a setup the controller fails adds nothing", &fakePods{err: fmt.Errorf("hns: %w", errors.New("unreachable"))}, &fakeNCProxy{},
			[]nodenetsvc.RequestType{setup}, codes.Unavailable, map[string][]string{}, nil, 0},
		{"a sandbox containerd does not have", &fakePods{err: fmt.Errorf("x: %w", plugin.ErrSandboxNotFound)}, &fakeNCProxy{},
			[]nodenetsvc.RequestType{setup}, codes.NotFound, map[string][]string{}, nil, 0},
		{"an AddNIC failing part way leaves nothing behind", &fakePods{net: mapped}, &fakeNCProxy{failAdd: "nri-hcn-portmap-s"},
			[]nodenetsvc.RequestType{setup}, codes.Unavailable, map[string][]string{},
			[]string{"add cbr0_s", "add nri-hcn-portmap-s", "delete cbr0_s"}, 1},
		{"a teardown deletes ours first, then removes the endpoint", &fakePods{net: mapped}, &fakeNCProxy{}, []nodenetsvc.RequestType{setup, teardown},
			codes.OK, map[string][]string{}, []string{"add cbr0_s", "add nri-hcn-portmap-s", "delete nri-hcn-portmap-s", "delete cbr0_s"}, 1},
		{"a repeated teardown is a no-op", &fakePods{net: mapped}, &fakeNCProxy{}, []nodenetsvc.RequestType{setup, teardown, teardown},
			codes.OK, map[string][]string{}, []string{"add cbr0_s", "add nri-hcn-portmap-s", "delete nri-hcn-portmap-s", "delete cbr0_s", "delete cbr0_s"}, 2},
		{"a teardown before any setup", &fakePods{net: mapped}, &fakeNCProxy{}, []nodenetsvc.RequestType{teardown},
			codes.OK, map[string][]string{}, []string{"delete cbr0_s"}, 1},
		{"a teardown whose VM is gone", &fakePods{net: mapped}, &fakeNCProxy{failDel: codes.FailedPrecondition}, []nodenetsvc.RequestType{setup, teardown},
			codes.OK, map[string][]string{"s": {"cbr0_s", "nri-hcn-portmap-s"}}, []string{"add cbr0_s", "add nri-hcn-portmap-s", "delete nri-hcn-portmap-s", "delete cbr0_s"}, 1},
		{"a teardown ncproxy fails keeps the endpoint", &fakePods{net: mapped}, &fakeNCProxy{failDel: codes.Internal}, []nodenetsvc.RequestType{setup, teardown},
			codes.Unavailable, map[string][]string{"s": {"cbr0_s", "nri-hcn-portmap-s"}}, []string{"add cbr0_s", "add nri-hcn-portmap-s", "delete nri-hcn-portmap-s", "delete cbr0_s"}, 0},
		{"a setup after a teardown", &fakePods{net: mapped}, &fakeNCProxy{}, []nodenetsvc.RequestType{setup, teardown, setup}, codes.OK,
			map[string][]string{"s": {"cbr0_s", "nri-hcn-portmap-s"}},
			[]string{"add cbr0_s", "add nri-hcn-portmap-s", "delete nri-hcn-portmap-s", "delete cbr0_s", "add cbr0_s", "add nri-hcn-portmap-s"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pods, ncp := tt.pods, tt.ncp
			c := serve(t, pods, ncp)
			var err error
			for _, r := range tt.requests {
				err = configure(c, "s", r)
			}
			if got := status.Code(err); got != tt.code {
				t.Fatalf("the last request answered %v (%v), want %v", got, err, tt.code)
			}
			nics, calls := ncp.state()
			if fmt.Sprint(nics) != fmt.Sprint(tt.nics) {
				t.Errorf("the VM's adapters %v, want %v", nics, tt.nics)
			}
			if !slices.Equal(calls, tt.calls) {
				t.Errorf("ncproxy was asked %q, want %q", calls, tt.calls)
			}
			if pods.teardowns != tt.teardowns {
				t.Errorf("%d teardowns of the endpoint, want %d", pods.teardowns, tt.teardowns)
			}
		})
	}
}

func TestABadRequestIsRefusedNamingWhatIsWrong(t *testing.T) {
	c := serve(t, &fakePods{net: mapped}, &fakeNCProxy{})
	for _, tt := range []struct {
		id   string
		typ  nodenetsvc.RequestType
		says string
	}{
		{"", nodenetsvc.RequestType_Setup, "container_id is empty"},
		{"s", nodenetsvc.RequestType(7), "sandbox s: request_type 7 is neither Setup nor Teardown"},
	} {
		err := configure(c, tt.id, tt.typ)
		if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != tt.says {
			t.Errorf("ConfigureNetworking(%q, %v) = %v, want InvalidArgument %q", tt.id, tt.typ, err, tt.says)
		}
	}
}

func TestANICIDIsTheSameOnEveryCallAndItsOwn(t *testing.T) {
	a := NICID("s", "E1")
	if a != NICID("s", "E1") {
		t.Fatal("NICID differs between calls")
	}
	for _, other := range []string{NICID("s", "E2"), NICID("t", "E1"), NICID("s/E", "1")} {
		if other == a {
			t.Errorf("NICID collides: %s", a)
		}
	}
}
