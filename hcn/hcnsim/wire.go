package hcnsim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
)

// The simulator speaks JSON over HTTP on a unix socket or loopback TCP:
// POST /v1/<Op> with a request body, answered by a response body whose Error
// carries the typed error's kind. Control calls (namespaces, faults, latency,
// state) use the same form under /v1/sim/.

type request struct {
	Name        string            `json:"name,omitempty"`
	ID          string            `json:"id,omitempty"`
	NamespaceID hcn.GUID          `json:"namespaceID,omitempty"`
	EndpointID  string            `json:"endpointID,omitempty"`
	Network     *hcn.NetworkSpec  `json:"network,omitempty"`
	Endpoint    *hcn.EndpointSpec `json:"endpoint,omitempty"`
	Fault       *Fault            `json:"fault,omitempty"`
	LatencyMS   int64             `json:"latencyMS,omitempty"`
	Serialized  bool              `json:"serialized,omitempty"`
	Rules       *Rules            `json:"rules,omitempty"`
}

type wireError struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
}

type response struct {
	Network   *hcn.Network   `json:"network,omitempty"`
	Networks  []hcn.Network  `json:"networks,omitempty"`
	Endpoint  *hcn.Endpoint  `json:"endpoint,omitempty"`
	Endpoints []hcn.Endpoint `json:"endpoints,omitempty"`
	Namespace *hcn.Namespace `json:"namespace,omitempty"`
	State     *State         `json:"state,omitempty"`
	Calls     map[string]int `json:"calls,omitempty"`
	Version   string         `json:"version,omitempty"`
	Error     *wireError     `json:"error,omitempty"`
}

// Handler serves s over HTTP.
func Handler(s *Sim) http.Handler {
	mux := http.NewServeMux()
	handle := func(op string, fn func(ctx context.Context, r request) (response, error)) {
		mux.HandleFunc("POST /v1/"+op, func(w http.ResponseWriter, hr *http.Request) {
			var r request
			var resp response
			var err error
			if derr := json.NewDecoder(hr.Body).Decode(&r); derr != nil && !errors.Is(derr, io.EOF) {
				err = fmt.Errorf("decoding request: %v (HCN_E_INVALID_JSON): %w", derr, hcn.ErrInvalid)
			} else {
				resp, err = fn(hr.Context(), r)
			}
			if err != nil {
				resp = response{Error: &wireError{Kind: hcn.NameOf(err), Message: err.Error()}}
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(resp)
		})
	}
	handle(OpGetNetworkByName, func(ctx context.Context, r request) (response, error) {
		n, err := s.GetNetworkByName(ctx, r.Name)
		return response{Network: n}, err
	})
	handle(OpListNetworks, func(ctx context.Context, _ request) (response, error) {
		ns, err := s.ListNetworks(ctx)
		return response{Networks: ns}, err
	})
	handle(OpCreateNetwork, func(ctx context.Context, r request) (response, error) {
		if r.Network == nil {
			return response{}, fmt.Errorf("no network settings: %w", hcn.ErrInvalid)
		}
		n, err := s.CreateNetwork(ctx, *r.Network)
		return response{Network: n}, err
	})
	handle(OpCreateEndpoint, func(ctx context.Context, r request) (response, error) {
		if r.Endpoint == nil {
			return response{}, fmt.Errorf("no endpoint settings: %w", hcn.ErrInvalid)
		}
		ep, err := s.CreateEndpoint(ctx, *r.Endpoint)
		return response{Endpoint: ep}, err
	})
	handle(OpListEndpointsByName, func(ctx context.Context, r request) (response, error) {
		eps, err := s.ListEndpointsByName(ctx, r.Name)
		return response{Endpoints: eps}, err
	})
	handle(OpListEndpoints, func(ctx context.Context, r request) (response, error) {
		eps, err := s.ListEndpoints(ctx)
		return response{Endpoints: eps}, err
	})
	handle(OpListEndpointsOfNetwork, func(ctx context.Context, r request) (response, error) {
		eps, err := s.ListEndpointsOfNetwork(ctx, r.ID)
		return response{Endpoints: eps}, err
	})
	handle(OpGetEndpoint, func(ctx context.Context, r request) (response, error) {
		ep, err := s.GetEndpoint(ctx, r.ID)
		return response{Endpoint: ep}, err
	})
	handle(OpDeleteEndpoint, func(ctx context.Context, r request) (response, error) {
		return response{}, s.DeleteEndpoint(ctx, r.ID)
	})
	handle(OpAddNamespaceEndpoint, func(ctx context.Context, r request) (response, error) {
		return response{}, s.AddNamespaceEndpoint(ctx, r.NamespaceID, r.EndpointID)
	})
	handle(OpRemoveNamespaceEndpoint, func(ctx context.Context, r request) (response, error) {
		return response{}, s.RemoveNamespaceEndpoint(ctx, r.NamespaceID, r.EndpointID)
	})
	handle(OpGetNamespace, func(ctx context.Context, r request) (response, error) {
		ns, err := s.GetNamespace(ctx, hcn.ParseGUID(r.ID))
		return response{Namespace: ns}, err
	})
	handle("sim/Version", func(ctx context.Context, _ request) (response, error) {
		v, err := s.Version(ctx)
		return response{Version: v}, err
	})
	handle("sim/CreateNamespace", func(_ context.Context, r request) (response, error) {
		return response{Namespace: &hcn.Namespace{ID: s.CreateNamespace(r.ID)}}, nil
	})
	handle("sim/DeleteNamespace", func(_ context.Context, r request) (response, error) {
		return response{}, s.DeleteNamespace(hcn.ParseGUID(r.ID))
	})
	handle("sim/RestartHNS", func(_ context.Context, _ request) (response, error) {
		s.RestartHNS()
		return response{}, nil
	})
	handle("sim/AddStaleEndpoint", func(_ context.Context, r request) (response, error) {
		if r.Endpoint == nil {
			return response{}, fmt.Errorf("no endpoint: %w", hcn.ErrInvalid)
		}
		ep, err := s.AddStaleEndpoint(*r.Endpoint, r.NamespaceID)
		return response{Endpoint: ep}, err
	})
	handle("sim/InjectFault", func(_ context.Context, r request) (response, error) {
		if r.Fault == nil {
			return response{}, fmt.Errorf("no fault: %w", hcn.ErrInvalid)
		}
		return response{}, s.InjectFault(*r.Fault)
	})
	handle("sim/SetLatency", func(_ context.Context, r request) (response, error) {
		s.SetLatency(time.Duration(r.LatencyMS) * time.Millisecond)
		return response{}, nil
	})
	handle("sim/SetOpLatency", func(_ context.Context, r request) (response, error) {
		if !slices.Contains(Ops(), r.Name) {
			return response{}, fmt.Errorf("op latency: unknown op %q: %w", r.Name, hcn.ErrInvalid)
		}
		s.SetOpLatency(r.Name, time.Duration(r.LatencyMS)*time.Millisecond)
		return response{}, nil
	})
	handle("sim/SetSerialized", func(_ context.Context, r request) (response, error) {
		s.SetSerialized(r.Serialized)
		return response{}, nil
	})
	handle("sim/SetRules", func(_ context.Context, r request) (response, error) {
		if r.Rules == nil {
			return response{}, fmt.Errorf("no rules: %w", hcn.ErrInvalid)
		}
		s.SetRules(*r.Rules)
		return response{}, nil
	})
	handle("sim/State", func(_ context.Context, _ request) (response, error) {
		st := s.State()
		return response{State: &st, Calls: s.Calls()}, nil
	})
	handle("sim/Reset", func(_ context.Context, _ request) (response, error) {
		s.Reset()
		return response{}, nil
	})
	return mux
}

// Listen opens the simulator's listener: "unix:///path", "tcp://127.0.0.1:port"
// or a bare socket path. A stale unix socket file is replaced.
func Listen(address string) (net.Listener, error) {
	network, addr, err := splitAddress(address)
	if err != nil {
		return nil, err
	}
	if network == "unix" {
		if err := os.Remove(addr); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("simulator: removing stale socket %s: %w", addr, err)
		}
	}
	l, err := net.Listen(network, addr)
	if err != nil {
		return nil, fmt.Errorf("simulator: listen on %s: %w", address, err)
	}
	return l, nil
}

func splitAddress(address string) (network, addr string, err error) {
	switch {
	case strings.HasPrefix(address, "unix://"):
		return "unix", strings.TrimPrefix(address, "unix://"), nil
	case strings.HasPrefix(address, "tcp://"):
		return "tcp", strings.TrimPrefix(address, "tcp://"), nil
	case strings.Contains(address, "://"):
		return "", "", fmt.Errorf("simulator address %q: scheme must be unix:// or tcp://", address)
	case address == "":
		return "", "", errors.New("simulator address is empty")
	}
	return "unix", address, nil
}

// Client reaches a simulator process. It implements hcn.Service plus the
// control calls tests and the demo use.
type Client struct {
	http *http.Client
}

var _ hcn.Node = (*Client)(nil)

// NewClient returns a client for the simulator at address (see Listen).
func NewClient(address string) (*Client, error) {
	network, addr, err := splitAddress(address)
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
		MaxIdleConnsPerHost: 16,
	}
	return &Client{http: &http.Client{Transport: tr}}, nil
}

// Close drops idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

func (c *Client) call(ctx context.Context, op string, r request) (*response, error) {
	body, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://hcnsim/v1/"+op, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	res, err := c.http.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("hcn simulator %s: %w: %w", op, hcn.ErrUnavailable, err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("hcn simulator %s: HTTP %s: %w", op, res.Status, hcn.ErrUnavailable)
	}
	var resp response
	if err := json.NewDecoder(res.Body).Decode(&resp); err != nil {
		return nil, fmt.Errorf("hcn simulator %s: decoding answer: %w", op, err)
	}
	if resp.Error != nil {
		// the message ends with the typed error's own text, which %w adds
		// back: say it once
		kind := errorFor(resp.Error.Kind)
		return nil, fmt.Errorf("%s: %w", strings.TrimSuffix(resp.Error.Message, ": "+kind.Error()), kind)
	}
	return &resp, nil
}

func errorFor(kind string) error {
	if err, ok := hcn.Named(kind); ok {
		return err
	}
	return hcn.ErrInternal
}

// GetNetworkByName implements hcn.Service.
func (c *Client) GetNetworkByName(ctx context.Context, name string) (*hcn.Network, error) {
	r, err := c.call(ctx, OpGetNetworkByName, request{Name: name})
	if err != nil {
		return nil, err
	}
	return r.Network, nil
}

// ListNetworks implements hcn.Service.
func (c *Client) ListNetworks(ctx context.Context) ([]hcn.Network, error) {
	r, err := c.call(ctx, OpListNetworks, request{})
	if err != nil {
		return nil, err
	}
	return r.Networks, nil
}

// CreateNetwork implements hcn.Service.
func (c *Client) CreateNetwork(ctx context.Context, spec hcn.NetworkSpec) (*hcn.Network, error) {
	r, err := c.call(ctx, OpCreateNetwork, request{Network: &spec})
	if err != nil {
		return nil, err
	}
	return r.Network, nil
}

// CreateEndpoint implements hcn.Service.
func (c *Client) CreateEndpoint(ctx context.Context, spec hcn.EndpointSpec) (*hcn.Endpoint, error) {
	r, err := c.call(ctx, OpCreateEndpoint, request{Endpoint: &spec})
	if err != nil {
		return nil, err
	}
	return r.Endpoint, nil
}

// ListEndpointsByName implements hcn.Service.
func (c *Client) ListEndpointsByName(ctx context.Context, name string) ([]hcn.Endpoint, error) {
	r, err := c.call(ctx, OpListEndpointsByName, request{Name: name})
	if err != nil {
		return nil, err
	}
	return r.Endpoints, nil
}

// ListEndpoints implements hcn.Service.
func (c *Client) ListEndpoints(ctx context.Context) ([]hcn.Endpoint, error) {
	r, err := c.call(ctx, OpListEndpoints, request{})
	if err != nil {
		return nil, err
	}
	return r.Endpoints, nil
}

// ListEndpointsOfNetwork implements hcn.Service.
func (c *Client) ListEndpointsOfNetwork(ctx context.Context, networkID string) ([]hcn.Endpoint, error) {
	r, err := c.call(ctx, OpListEndpointsOfNetwork, request{ID: networkID})
	if err != nil {
		return nil, err
	}
	return r.Endpoints, nil
}

// GetEndpoint implements hcn.Service.
func (c *Client) GetEndpoint(ctx context.Context, id string) (*hcn.Endpoint, error) {
	r, err := c.call(ctx, OpGetEndpoint, request{ID: id})
	if err != nil {
		return nil, err
	}
	return r.Endpoint, nil
}

// DeleteEndpoint implements hcn.Service.
func (c *Client) DeleteEndpoint(ctx context.Context, id string) error {
	_, err := c.call(ctx, OpDeleteEndpoint, request{ID: id})
	return err
}

// AddNamespaceEndpoint implements hcn.Service.
func (c *Client) AddNamespaceEndpoint(ctx context.Context, namespaceID hcn.GUID, endpointID string) error {
	_, err := c.call(ctx, OpAddNamespaceEndpoint, request{NamespaceID: namespaceID, EndpointID: endpointID})
	return err
}

// RemoveNamespaceEndpoint implements hcn.Service.
func (c *Client) RemoveNamespaceEndpoint(ctx context.Context, namespaceID hcn.GUID, endpointID string) error {
	_, err := c.call(ctx, OpRemoveNamespaceEndpoint, request{NamespaceID: namespaceID, EndpointID: endpointID})
	return err
}

// GetNamespace implements hcn.Service.
func (c *Client) GetNamespace(ctx context.Context, id hcn.GUID) (*hcn.Namespace, error) {
	r, err := c.call(ctx, OpGetNamespace, request{ID: id.String()})
	if err != nil {
		return nil, err
	}
	return r.Namespace, nil
}

// CreateNamespace creates a namespace in the simulator ("" = fresh GUID).
func (c *Client) CreateNamespace(ctx context.Context, id string) (hcn.GUID, error) {
	r, err := c.call(ctx, "sim/CreateNamespace", request{ID: id})
	if err != nil {
		return "", err
	}
	return r.Namespace.ID, nil
}

// DeleteNamespace deletes a namespace, detaching its endpoints.
func (c *Client) DeleteNamespace(ctx context.Context, id hcn.GUID) error {
	_, err := c.call(ctx, "sim/DeleteNamespace", request{ID: id.String()})
	return err
}

// Version implements hcn.Node.
func (c *Client) Version(ctx context.Context) (string, error) {
	r, err := c.call(ctx, "sim/Version", request{})
	if err != nil {
		return "", err
	}
	return r.Version, nil
}

// NewNamespace implements hcn.Node.
func (c *Client) NewNamespace(ctx context.Context) (hcn.GUID, error) {
	return c.CreateNamespace(ctx, "")
}

// RemoveNamespace implements hcn.Node.
func (c *Client) RemoveNamespace(ctx context.Context, id hcn.GUID) error {
	return c.DeleteNamespace(ctx, id)
}

// RestartHNS drops every endpoint, as an HNS restart does.
func (c *Client) RestartHNS(ctx context.Context) error {
	_, err := c.call(ctx, "sim/RestartHNS", request{})
	return err
}

// AddStaleEndpoint leaves an endpoint naming the gone namespace ns, as a
// reboot can.
func (c *Client) AddStaleEndpoint(ctx context.Context, spec hcn.EndpointSpec, ns hcn.GUID) (*hcn.Endpoint, error) {
	r, err := c.call(ctx, "sim/AddStaleEndpoint", request{Endpoint: &spec, NamespaceID: ns})
	if err != nil {
		return nil, err
	}
	return r.Endpoint, nil
}

// InjectFault queues a fault in the simulator.
func (c *Client) InjectFault(ctx context.Context, f Fault) error {
	_, err := c.call(ctx, "sim/InjectFault", request{Fault: &f})
	return err
}

// SetLatency sets the simulator's per-call latency.
func (c *Client) SetLatency(ctx context.Context, d time.Duration) error {
	_, err := c.call(ctx, "sim/SetLatency", request{LatencyMS: d.Milliseconds()})
	return err
}

// SetOpLatency sets the latency of one operation (0: back to the common
// latency).
func (c *Client) SetOpLatency(ctx context.Context, op string, d time.Duration) error {
	_, err := c.call(ctx, "sim/SetOpLatency", request{Name: op, LatencyMS: d.Milliseconds()})
	return err
}

// SetSerialized makes the simulator run one call at a time, latency
// included, as HNS does for much of its work.
func (c *Client) SetSerialized(ctx context.Context, on bool) error {
	_, err := c.call(ctx, "sim/SetSerialized", request{Serialized: on})
	return err
}

// SetRules chooses the variants of the unverified HNS rules.
func (c *Client) SetRules(ctx context.Context, r Rules) error {
	_, err := c.call(ctx, "sim/SetRules", request{Rules: &r})
	return err
}

// State returns the simulator's state and call counts.
func (c *Client) State(ctx context.Context) (State, map[string]int, error) {
	r, err := c.call(ctx, "sim/State", request{})
	if err != nil {
		return State{}, nil, err
	}
	return *r.State, r.Calls, nil
}

// Reset clears the simulator.
func (c *Client) Reset(ctx context.Context) error {
	_, err := c.call(ctx, "sim/Reset", request{})
	return err
}
