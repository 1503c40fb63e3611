// Package hnsemu emulates HNS for hcsshim's hcn package running under wine:
// stub computenetwork.dll and vmcompute.dll (dll/hnsstub.c) forward every
// Hcn* call and HNSCall over TCP to this emulator, which keeps its state in
// the project's HNS model (hcn/hcnsim) and answers with HNS's JSON schema
// and HRESULTs. Tests reach its control calls (Emu.*) the same way.
package hnsemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
)

// HRESULTs the emulator answers besides those of hcn's table of HNS errors
// (fail).
const (
	hrOK       = 0
	hrNotImpl  = 0x80004001 // E_NOTIMPL
	hrNotFound = 0x80070490 // HRESULT_FROM_WIN32(ERROR_NOT_FOUND), as the table's not-found
)

type object struct{ kind, id string }

// Emulator is one emulated HNS.
type Emulator struct {
	sim *hcnsim.Sim

	mu           sync.Mutex
	handles      map[uint64]object
	next         uint64
	lastSettings map[string]string   // function -> the last settings JSON it received
	hresults     map[string][]uint32 // function -> HRESULTs its next calls answer
	latency      time.Duration       // of every HNS call (each DLL call is one round trip to HNS)
}

// New returns an emulator over a fresh HNS model.
func New() *Emulator {
	return &Emulator{sim: hcnsim.New(), handles: map[uint64]object{}, next: 1, lastSettings: map[string]string{},
		hresults: map[string][]uint32{}}
}

// Model is the HNS model the emulator answers from.
func (e *Emulator) Model() *hcnsim.Sim { return e.sim }

// Serve answers connections on l until it is closed.
func (e *Emulator) Serve(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go e.serveConn(c)
	}
}

func (e *Emulator) serveConn(c net.Conn) {
	defer c.Close()
	r := bufio.NewReader(c)
	fn, args, err := ReadRequest(r)
	if err != nil {
		return
	}
	hr, handle, out, result := e.dispatch(fn, args)
	_ = WriteResponse(c, hr, handle, out, result)
}

// ReadRequest reads "<fn> <nargs>\n" and the length-prefixed arguments.
func ReadRequest(r *bufio.Reader) (string, []string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", nil, err
	}
	fn, n, ok := strings.Cut(strings.TrimSpace(line), " ")
	nargs, err := strconv.Atoi(n)
	if !ok || err != nil || nargs < 0 || nargs > 16 {
		return "", nil, fmt.Errorf("bad request line %q", line)
	}
	args := make([]string, nargs)
	for i := range args {
		l, err := r.ReadString('\n')
		if err != nil {
			return "", nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(l))
		if err != nil || size < 0 || size > 16<<20 {
			return "", nil, fmt.Errorf("bad argument length %q", l)
		}
		b := make([]byte, size)
		if _, err := io.ReadFull(r, b); err != nil {
			return "", nil, err
		}
		args[i] = string(b)
	}
	return fn, args, nil
}

// WriteResponse writes "<hr> <handle> <outlen> <resultlen>\n<out><result>".
func WriteResponse(w io.Writer, hr uint32, handle uint64, out, result string) error {
	_, err := fmt.Fprintf(w, "%d %d %d %d\n%s%s", int32(hr), handle, len(out), len(result), out, result)
	return err
}

func errorRecord(hr uint32, err error) string {
	b, _ := json.Marshal(map[string]any{"Success": false, "Error": err.Error(), "ErrorCode": hr})
	return string(b)
}

// nextHRESULT pops an injected HRESULT of fn.
func (e *Emulator) nextHRESULT(fn string) (uint32, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	q := e.hresults[fn]
	if len(q) == 0 {
		return 0, false
	}
	e.hresults[fn] = q[1:]
	return q[0], true
}

// flagNames writes NAT flags as HNS's schema names them.
func flagNames(f hcn.NatFlags) string {
	var names []string
	if f&hcn.NatFlagsLocalRoutedVip != 0 {
		names = append(names, "LocalRoutedVip")
	}
	if f&hcn.NatFlagsIPv6 != 0 {
		names = append(names, "IPv6")
	}
	if len(names) == 0 {
		return "None"
	}
	return strings.Join(names, ",")
}

// fail maps the model's typed errors onto the HRESULTs HNS answers, as
// hcn's table of HNS errors says (the first code of each kind).
func fail(err error) (uint32, uint64, string, string) {
	hr := uint32(hcn.CodeOf(err))
	return hr, 0, "", errorRecord(hr, err)
}

func ok(out string) (uint32, uint64, string, string) { return hrOK, 0, out, "" }

func (e *Emulator) open(kind, id string) uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	h := e.next
	e.next++
	e.handles[h] = object{kind, hcn.CanonicalGUID(id)}
	return h
}

func (e *Emulator) lookup(kind, handle string) (string, error) {
	h, err := strconv.ParseUint(handle, 10, 64)
	if err != nil {
		return "", fmt.Errorf("bad handle %q: %w", handle, hcn.ErrInvalid)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	o, ok := e.handles[h]
	if !ok || o.kind != kind {
		return "", fmt.Errorf("invalid %s handle %d: %w", kind, h, hcn.ErrInvalid)
	}
	return o.id, nil
}

func (e *Emulator) remember(fn, settings string) {
	e.mu.Lock()
	e.lastSettings[fn] = settings
	e.mu.Unlock()
}

// kindOf is "network", "endpoint" or "namespace" from a function name.
func kindOf(fn, prefix string) string {
	return strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(fn, prefix), "s"))
}

// objects lists the filterable fields (upper-case names, as HNS matches
// them) of every object of a kind.
func (e *Emulator) objects(kind string) []map[string]string {
	st := e.sim.State()
	var out []map[string]string
	switch kind {
	case "network":
		for _, n := range st.Networks {
			out = append(out, map[string]string{"ID": n.ID, "NAME": n.Name})
		}
	case "endpoint":
		for _, ep := range st.Endpoints {
			// VirtualNetwork: the filter hcsshim's ListEndpointsOfNetwork sends
			out = append(out, map[string]string{"ID": ep.ID, "NAME": ep.Name, "HOSTCOMPUTENETWORK": ep.NetworkID, "VIRTUALNETWORK": ep.NetworkID})
		}
	case "namespace":
		for _, ns := range st.Namespaces {
			out = append(out, map[string]string{"ID": ns.ID.String()})
		}
	}
	return out
}

// HNS JSON schema (the subset hcsshim sends and reads).
type (
	policy struct {
		Type     string          `json:"Type"`
		Settings json.RawMessage `json:"Settings,omitempty"`
	}
	portMappingSettings struct {
		Protocol     uint32 `json:",omitempty"`
		InternalPort uint16 `json:",omitempty"`
		ExternalPort uint16 `json:",omitempty"`
		VIP          string `json:",omitempty"`
		Flags        uint32 `json:",omitempty"`
	}
	endpointJSON struct {
		ID                   string     `json:"ID,omitempty"`
		Name                 string     `json:",omitempty"`
		HostComputeNetwork   string     `json:",omitempty"`
		HostComputeNamespace string     `json:",omitempty"`
		Policies             []policy   `json:",omitempty"`
		IpConfigurations     []ipConfig `json:",omitempty"`
		Dns                  dnsJSON    `json:",omitempty"`
		Routes               []route    `json:",omitempty"`
		SchemaVersion        version    `json:",omitempty"`
	}
	dnsJSON struct { // hcsshim's hcn.Dns
		Domain     string   `json:",omitempty"`
		Search     []string `json:",omitempty"`
		ServerList []string `json:",omitempty"`
		Options    []string `json:",omitempty"`
	}
	route struct {
		NextHop           string `json:",omitempty"`
		DestinationPrefix string `json:",omitempty"`
		Metric            uint16 `json:",omitempty"`
	}
	ipConfig struct {
		IpAddress    string `json:",omitempty"`
		PrefixLength uint8  `json:",omitempty"`
	}
	version     struct{ Major, Minor int }
	networkJSON struct {
		ID       string   `json:"ID,omitempty"`
		Name     string   `json:",omitempty"`
		Type     string   `json:",omitempty"`
		Policies []policy `json:",omitempty"`
		Ipams    []struct {
			Type    string `json:",omitempty"`
			Subnets []struct {
				IpAddressPrefix string  `json:",omitempty"`
				Routes          []route `json:",omitempty"`
			} `json:",omitempty"`
		} `json:",omitempty"`
		SchemaVersion version `json:",omitempty"`
	}
	namespaceJSON struct {
		ID            string     `json:"ID,omitempty"`
		Type          string     `json:",omitempty"`
		Resources     []resource `json:",omitempty"`
		SchemaVersion version    `json:",omitempty"`
	}
	resource struct {
		Type string          `json:""`
		Data json.RawMessage `json:""`
	}
)

var v2 = version{2, 0}

// matches applies a query's filter: IDs in any case, names exactly or,
// with fold, in any case (Rules.NameFold).
func matches(query string, fields map[string]string, fold bool) bool {
	var q struct{ Filter string }
	if query == "" || json.Unmarshal([]byte(query), &q) != nil || q.Filter == "" {
		return true
	}
	var filter map[string]string
	if json.Unmarshal([]byte(q.Filter), &filter) != nil {
		return false
	}
	for k, v := range filter {
		key := strings.ToUpper(k)
		got, ok := fields[key]
		if !ok || (key == "NAME" && !fold && got != v) || !strings.EqualFold(got, v) {
			return false
		}
	}
	return true
}

func idList(ids []string) string {
	if ids == nil {
		ids = []string{}
	}
	b, _ := json.Marshal(ids)
	return string(b)
}

// v1NAT is how the emulator shows a v1 NAT policy through the v2 API when
// HNS does not show it as a PortMapping (hcnsim.Rules.V1NATAsPortMapping):
// a policy of type NAT with the v1 policy's fields. Not seen on a host.
type v1NAT struct {
	InternalPort uint16 `json:",omitempty"`
	ExternalPort uint16 `json:",omitempty"`
	Protocol     string `json:",omitempty"` // "TCP" or "UDP", as v1 policies carry it
	VIP          string `json:",omitempty"`
}

func endpointOut(ep hcn.Endpoint, rules hcnsim.Rules) endpointJSON {
	// as some HNS versions do: an unattached endpoint's namespace is the
	// zero GUID, and GUIDs come in lower case with braces (the adapter must
	// take any spelling)
	ns := hcn.ZeroGUID
	if ep.Namespace != "" {
		ns = "{" + strings.ToLower(ep.Namespace.String()) + "}"
	}
	out := endpointJSON{ID: ep.ID, Name: ep.Name, HostComputeNetwork: ep.NetworkID, HostComputeNamespace: ns, SchemaVersion: v2}
	for _, p := range ep.PortMappings {
		raw, _ := json.Marshal(portMappingSettings{Protocol: uint32(p.Protocol), InternalPort: p.InternalPort,
			ExternalPort: p.ExternalPort, VIP: p.VIP, Flags: uint32(p.Flags)})
		if rules.EnumsAsNames { // as HNS's schema writes enums (unverified for a read-back)
			raw, _ = json.Marshal(map[string]any{"Protocol": strings.ToUpper(p.Protocol.String()), "InternalPort": p.InternalPort,
				"ExternalPort": p.ExternalPort, "VIP": p.VIP, "Flags": flagNames(p.Flags)})
		}
		if rules.FlagNameUnknown { // a flag this plugin does not know (not seen)
			raw, _ = json.Marshal(map[string]any{"Protocol": uint32(p.Protocol), "InternalPort": p.InternalPort,
				"ExternalPort": p.ExternalPort, "VIP": p.VIP, "Flags": flagNames(p.Flags) + ",FlagOfANewerBuild"})
		}
		out.Policies = append(out.Policies, policy{Type: "PortMapping", Settings: raw})
	}
	for _, p := range ep.NATPolicies {
		if rules.V1NATAsPortMapping {
			raw, _ := json.Marshal(portMappingSettings{Protocol: uint32(p.Protocol), InternalPort: p.InternalPort, ExternalPort: p.ExternalPort, VIP: p.VIP})
			out.Policies = append(out.Policies, policy{Type: "PortMapping", Settings: raw})
			continue
		}
		raw, _ := json.Marshal(v1NAT{InternalPort: p.InternalPort, ExternalPort: p.ExternalPort, Protocol: strings.ToUpper(p.Protocol.String()), VIP: p.VIP})
		out.Policies = append(out.Policies, policy{Type: "NAT", Settings: raw})
	}
	if ep.OutboundNAT {
		out.Policies = append(out.Policies, policy{Type: "OutBoundNAT", Settings: json.RawMessage(`{}`)})
	}
	if ep.IPAddress != "" {
		out.IpConfigurations = []ipConfig{{IpAddress: ep.IPAddress, PrefixLength: 16}}
	}
	for _, r := range ep.Routes {
		out.Routes = append(out.Routes, route{NextHop: r.NextHop, DestinationPrefix: r.DestinationPrefix, Metric: r.Metric})
	}
	out.Dns = dnsJSON{Domain: ep.DNS.Domain, Search: ep.DNS.Search, ServerList: ep.DNS.ServerList, Options: ep.DNS.Options}
	return out
}

func (e *Emulator) dispatch(fn string, a []string) (uint32, uint64, string, string) {
	ctx := context.Background()
	arg := func(i int) string {
		if i < len(a) {
			return a[i]
		}
		return ""
	}
	st := func() hcnsim.State { return e.sim.State() }
	if strings.HasPrefix(fn, "Hcn") || fn == "HNSCall" { // an HNS round trip: listings pay it per endpoint, as through hcsshim
		e.mu.Lock()
		d := e.latency
		e.mu.Unlock()
		time.Sleep(d)
	}
	if hr, ok := e.nextHRESULT(fn); ok { // an HRESULT a test asked for
		return hr, 0, "", errorRecord(hr, fmt.Errorf("injected HRESULT %#x in %s", hr, fn))
	}
	switch fn {
	case "HNSCall":
		if arg(0) == "GET" && arg(1) == "/globals/version" {
			return ok(`{"Success":true,"Output":{"Major":15,"Minor":1}}`)
		}
		return ok(`{"Success":false,"Error":"not emulated"}`)

	case "HcnEnumerateNetworks", "HcnEnumerateEndpoints", "HcnEnumerateNamespaces":
		var ids []string
		fold := e.sim.Rules().NameFold
		for _, o := range e.objects(kindOf(fn, "HcnEnumerate")) {
			if matches(arg(0), o, fold) {
				ids = append(ids, o["ID"])
			}
		}
		return ok(idList(ids))
	case "HcnOpenNetwork", "HcnOpenEndpoint", "HcnOpenNamespace":
		kind := kindOf(fn, "HcnOpen")
		for _, o := range e.objects(kind) {
			if o["ID"] == hcn.CanonicalGUID(arg(0)) {
				return hrOK, e.open(kind, o["ID"]), "", ""
			}
		}
		return fail(fmt.Errorf("%s %s: %w", kind, arg(0), hcn.ErrNotFound))
	case "HcnCreateNetwork":
		e.remember(fn, arg(1))
		var in networkJSON
		if err := json.Unmarshal([]byte(arg(1)), &in); err != nil {
			return fail(fmt.Errorf("network settings: %v: %w", err, hcn.ErrInvalid))
		}
		spec := hcn.NetworkSpec{Name: in.Name, Type: hcn.NetworkType(in.Type)}
		if len(in.Ipams) > 0 && len(in.Ipams[0].Subnets) > 0 {
			s := in.Ipams[0].Subnets[0]
			spec.Subnet = s.IpAddressPrefix
			if len(s.Routes) > 0 {
				spec.Gateway = s.Routes[0].NextHop
			}
		}
		n, err := e.sim.CreateNetwork(ctx, spec)
		if err != nil {
			return fail(err)
		}
		return hrOK, e.open("network", n.ID), "", ""
	case "HcnQueryNetworkProperties":
		id, err := e.lookup("network", arg(0))
		if err != nil {
			return fail(err)
		}
		for _, n := range st().Networks {
			if n.ID == id {
				out := map[string]any{"ID": n.ID, "Name": n.Name, "Type": e.sim.Rules().ReadNetwork(n).Type, "SchemaVersion": v2}
				if len(n.Subnets) > 0 {
					subnet := map[string]any{"IpAddressPrefix": n.Subnets[0]}
					if n.Gateway != "" {
						subnet["Routes"] = []route{{NextHop: n.Gateway, DestinationPrefix: "0.0.0.0/0"}}
					}
					out["Ipams"] = []any{map[string]any{"Type": "Static", "Subnets": []any{subnet}}}
				}
				b, _ := json.Marshal(out)
				return ok(string(b))
			}
		}
		return fail(fmt.Errorf("network %s: %w", id, hcn.ErrNotFound))

	case "HcnCreateEndpoint":
		e.remember(fn, arg(2))
		netID, err := e.lookup("network", arg(0))
		if err != nil {
			return fail(err)
		}
		var in endpointJSON
		if err := json.Unmarshal([]byte(arg(2)), &in); err != nil {
			return fail(fmt.Errorf("endpoint settings: %v: %w", err, hcn.ErrInvalid))
		}
		spec := hcn.EndpointSpec{Name: in.Name, NetworkID: netID, Namespace: hcn.ParseGUID(in.HostComputeNamespace),
			DNS: hcn.DNS{Domain: in.Dns.Domain, Search: in.Dns.Search, ServerList: in.Dns.ServerList, Options: in.Dns.Options}}
		for _, r := range in.Routes {
			spec.Routes = append(spec.Routes, hcn.Route{DestinationPrefix: r.DestinationPrefix, NextHop: r.NextHop, Metric: r.Metric})
		}
		for _, p := range in.Policies {
			switch p.Type {
			case "PortMapping":
				var s portMappingSettings
				if err := json.Unmarshal(p.Settings, &s); err != nil {
					return fail(fmt.Errorf("PortMapping settings: %v: %w", err, hcn.ErrInvalid))
				}
				spec.PortMappings = append(spec.PortMappings, hcn.PortMappingPolicy{Protocol: hcn.Protocol(s.Protocol),
					InternalPort: s.InternalPort, ExternalPort: s.ExternalPort, VIP: s.VIP, Flags: hcn.NatFlags(s.Flags)})
			case "OutBoundNAT":
				spec.OutboundNAT = true
			default:
				return fail(fmt.Errorf("policy type %q is not emulated: %w", p.Type, hcn.ErrInvalid))
			}
		}
		ep, err := e.sim.CreateEndpoint(ctx, spec)
		if err != nil {
			return fail(err)
		}
		return hrOK, e.open("endpoint", ep.ID), "", ""
	case "HcnQueryEndpointProperties":
		id, err := e.lookup("endpoint", arg(0))
		if err != nil {
			return fail(err)
		}
		for _, ep := range st().Endpoints {
			if ep.ID == id {
				b, _ := json.Marshal(endpointOut(ep, e.sim.Rules()))
				return ok(string(b))
			}
		}
		return fail(fmt.Errorf("endpoint %s: %w", id, hcn.ErrNotFound))
	case "HcnDeleteEndpoint":
		if err := e.sim.DeleteEndpoint(ctx, hcn.CanonicalGUID(arg(0))); err != nil {
			return fail(err)
		}
		return ok("")

	case "HcnCreateNamespace":
		e.remember(fn, arg(1))
		var in namespaceJSON
		if err := json.Unmarshal([]byte(arg(1)), &in); err != nil {
			return fail(fmt.Errorf("namespace settings: %v: %w", err, hcn.ErrInvalid))
		}
		id := e.sim.CreateNamespaceOfType("", in.Type) // no type: Host, as containerd's
		return hrOK, e.open("namespace", id.String()), "", ""
	case "HcnQueryNamespaceProperties":
		id, err := e.lookup("namespace", arg(0))
		if err != nil {
			return fail(err)
		}
		ns, err := e.sim.GetNamespace(ctx, hcn.ParseGUID(id))
		if err != nil {
			return fail(err)
		}
		typ := hcnsim.NamespaceHost
		for _, n := range st().Namespaces {
			if n.ID == ns.ID {
				typ = n.Type
			}
		}
		out := namespaceJSON{ID: ns.ID.String(), Type: typ, SchemaVersion: v2}
		for _, ep := range ns.Endpoints {
			data, _ := json.Marshal(map[string]string{"ID": ep})
			out.Resources = append(out.Resources, resource{Type: "Endpoint", Data: data})
		}
		b, _ := json.Marshal(out)
		return ok(string(b))
	case "HcnModifyNamespace":
		e.remember(fn, arg(1))
		id, err := e.lookup("namespace", arg(0))
		if err != nil {
			return fail(err)
		}
		var req struct {
			ResourceType, RequestType string
			Settings                  struct{ EndpointId string }
		}
		if err := json.Unmarshal([]byte(arg(1)), &req); err != nil || req.ResourceType != "Endpoint" {
			return fail(fmt.Errorf("namespace modify request %q: %w", arg(1), hcn.ErrInvalid))
		}
		ep := hcn.CanonicalGUID(req.Settings.EndpointId)
		switch req.RequestType {
		case "Add":
			err = e.sim.AddNamespaceEndpoint(ctx, hcn.ParseGUID(id), ep)
		case "Remove":
			err = e.sim.RemoveNamespaceEndpoint(ctx, hcn.ParseGUID(id), ep)
		default:
			err = fmt.Errorf("request type %q: %w", req.RequestType, hcn.ErrInvalid)
		}
		if err != nil {
			return fail(err)
		}
		return ok("")
	case "HcnDeleteNamespace":
		if err := e.sim.DeleteNamespace(hcn.ParseGUID(arg(0))); err != nil {
			return fail(err)
		}
		return ok("")

	case "HcnCloseNetwork", "HcnCloseEndpoint", "HcnCloseNamespace":
		h, _ := strconv.ParseUint(arg(0), 10, 64)
		e.mu.Lock()
		delete(e.handles, h)
		e.mu.Unlock()
		return ok("")
	case "HcnModifyNetwork", "HcnDeleteNetwork", "HcnModifyEndpoint":
		return hrNotImpl, 0, "", errorRecord(hrNotImpl, errors.New(fn+" is not emulated"))

	// control calls for tests
	case "Emu.LastSettings":
		e.mu.Lock()
		defer e.mu.Unlock()
		return ok(e.lastSettings[arg(0)])
	case "Emu.SetLatency": // milliseconds every HNS call takes (a listing pays it per endpoint)
		ms, _ := strconv.Atoi(arg(0))
		e.mu.Lock()
		e.latency = time.Duration(ms) * time.Millisecond
		e.mu.Unlock()
		return ok("")
	case "Emu.InjectFault":
		var f hcnsim.Fault
		if err := json.Unmarshal([]byte(arg(0)), &f); err != nil {
			return fail(fmt.Errorf("fault: %v: %w", err, hcn.ErrInvalid))
		}
		if err := e.sim.InjectFault(f); err != nil {
			return fail(err)
		}
		return ok("")
	case "Emu.InjectHRESULT": // function, HRESULT: the function's next call answers it
		hr, err := strconv.ParseUint(arg(1), 0, 32)
		if err != nil {
			return fail(fmt.Errorf("HRESULT %q: %w", arg(1), hcn.ErrInvalid))
		}
		e.mu.Lock()
		e.hresults[arg(0)] = append(e.hresults[arg(0)], uint32(hr))
		e.mu.Unlock()
		return ok("")
	case "Emu.RestartHNS": // every endpoint gone, as after an HNS restart
		e.sim.RestartHNS()
		return ok("")
	case "Emu.AddStaleEndpoint": // endpoint spec JSON, namespace GUID: what a reboot can leave
		var spec hcn.EndpointSpec
		if err := json.Unmarshal([]byte(arg(0)), &spec); err != nil {
			return fail(fmt.Errorf("endpoint spec: %v: %w", err, hcn.ErrInvalid))
		}
		ep, err := e.sim.AddStaleEndpoint(spec, hcn.ParseGUID(arg(1)))
		if err != nil {
			return fail(err)
		}
		return ok(ep.ID)
	case "Emu.CreateEndpoint": // endpoint spec JSON: an endpoint a CNI made, e.g. through HNS v1 with NAT policies
		var spec hcn.EndpointSpec
		if err := json.Unmarshal([]byte(arg(0)), &spec); err != nil {
			return fail(fmt.Errorf("endpoint spec: %v: %w", err, hcn.ErrInvalid))
		}
		ep, err := e.sim.CreateEndpoint(ctx, spec)
		if err != nil {
			return fail(err)
		}
		return ok(ep.ID)
	case "Emu.SetRules": // hcnsim.Rules JSON: the variants of the unverified HNS rules
		var r hcnsim.Rules
		if err := json.Unmarshal([]byte(arg(0)), &r); err != nil {
			return fail(fmt.Errorf("rules: %v: %w", err, hcn.ErrInvalid))
		}
		e.sim.SetRules(r)
		return ok("")
	case "Emu.Rules": // the rule variants in force, as hcnsim.Rules JSON
		b, _ := json.Marshal(e.sim.Rules())
		return ok(string(b))
	case "Emu.State":
		b, _ := json.Marshal(e.sim.State())
		return ok(string(b))
	}
	return hrNotImpl, 0, "", errorRecord(hrNotImpl, fmt.Errorf("%s is not emulated", fn))
}

// Call sends one request to an emulator at addr (what the stub DLLs do; the
// tests use it for control calls).
func Call(addr, fn string, args ...string) (hr uint32, out, result string, err error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, "", "", err
	}
	defer c.Close()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %d\n", fn, len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "%d\n%s", len(a), a)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return 0, "", "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, "", "", err
	}
	var h int32
	var handle uint64
	var ol, rl int
	if _, err := fmt.Sscanf(line, "%d %d %d %d", &h, &handle, &ol, &rl); err != nil {
		return 0, "", "", err
	}
	buf := make([]byte, ol+rl)
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, "", "", err
	}
	return uint32(h), string(buf[:ol]), string(buf[ol:]), nil
}
