package doctor

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

// SelfTestOptions shape the self-test.
type SelfTestOptions struct {
	// HostPort the throwaway endpoint maps (to container port 80).
	HostPort uint16
	// Keep leaves the namespace and endpoint for inspection (e.g. of the
	// compartment's routes); the next self-test removes them first.
	Keep bool
}

// SelfTest builds what the plugin builds for a pod, with the plugin's
// configuration: a throwaway HCN namespace, and an endpoint with a port
// mapping and the configured route, attached to it. It reads everything
// back from HNS, compares it field by field with what was sent, and
// removes all of it (leftovers of earlier self-tests first).
func (d *Doctor) SelfTest(ctx context.Context, o SelfTestOptions) (r Report) {
	add := func(check string, st Status, detail, fix string) {
		r.Results = append(r.Results, Result{check, st, detail, fix})
	}
	if d.HNSErr != nil {
		add("selftest", Fail, "HNS: "+d.HNSErr.Error(), "see the HNS check")
		return r
	}
	step := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, d.timeout()) }

	sctx, cancel := step()
	n, err := d.removeLeftovers(sctx)
	cancel()
	if err != nil {
		add("selftest: leftovers", Fail, err.Error(), "remove endpoints named "+SelfTestPrefix+"* by hand")
		return r
	}
	if n > 0 {
		add("selftest: leftovers", Pass, fmt.Sprintf("removed %d endpoint(s) an earlier self-test left", n), "")
	}

	c := d.Config.HCN
	mc := plugin.ManagerConfig(c) // what the plugin would build, under the self-test's names
	mc.Prefix = SelfTestPrefix
	mgr := hcn.NewManager(d.HNS, mc)
	sctx, cancel = step()
	_, err = mgr.EnsureNetwork(sctx) // created here when the plugin would create it
	var network *hcn.Network
	if err == nil {
		network, err = d.HNS.GetNetworkByName(sctx, c.Network)
	}
	cancel()
	if err != nil {
		add("selftest", Fail, fmt.Sprintf("network %s: %v", c.Network, err), "see the network check")
		return r
	}
	policies := request.BuildPolicies([]request.PortMapping{{Protocol: hcn.TCP, ContainerPort: 80, HostPort: o.HostPort}},
		request.PolicyOptions{LocalRoutedVIP: c.LocalRoutedVIP, DualStack: c.DualStack})
	routes, err := hcn.RouteMode(c.DefaultRoute).Routes(cmp.Or(network.Gateway, c.Gateway), uint16(c.RouteMetric))
	if err != nil {
		add("selftest", Fail, err.Error(), "see the network check")
		return r
	}

	sctx, cancel = step()
	ns, err := d.HNS.NewNamespace(sctx)
	cancel()
	if err != nil {
		add("selftest: namespace", Fail, "creating a namespace: "+err.Error(), "HNS must create namespaces: see the HNS check")
		return r
	}
	add("selftest: namespace", Pass, "created "+ns.String(), "")
	id := randomID()
	name := mgr.EndpointName(id)
	defer func() {
		if o.Keep {
			add("selftest: cleanup", Warn, fmt.Sprintf("kept endpoint %s in namespace %s; the next self-test removes them", name, ns), "")
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.timeout())
		defer cancel()
		_, rerr := mgr.Remove(cctx, id)
		nerr := d.HNS.RemoveNamespace(cctx, ns)
		left, lerr := d.HNS.ListEndpointsByName(cctx, name)
		switch {
		case rerr != nil || lerr != nil || (nerr != nil && !errors.Is(nerr, hcn.ErrNotFound)):
			add("selftest: cleanup", Fail, fmt.Sprint(errors.Join(rerr, nerr, lerr)), "remove endpoint "+name+" and namespace "+ns.String()+" by hand")
		case slices.ContainsFunc(left, func(ep hcn.Endpoint) bool { return ep.Name == name }):
			add("selftest: cleanup", Fail, "endpoint "+name+" is still there after its removal", "remove it by hand")
		default:
			add("selftest: cleanup", Pass, "endpoint and namespace removed", "")
		}
	}()

	sctx, cancel = step()
	ep, _, err := mgr.Ensure(sctx, hcn.Desired{SandboxID: id, Namespace: ns, Policies: policies, DNS: selfTestDNS()})
	cancel()
	if err != nil {
		add("selftest: endpoint", Fail, err.Error(), fixFor(err, o.HostPort))
		return r
	}
	add("selftest: endpoint", Pass, fmt.Sprintf("%s (%s) created and attached", name, ep.ID), "")

	// read back from HNS, not from what the manager remembers
	sctx, cancel = step()
	defer cancel()
	got, err := d.HNS.ListEndpointsByName(sctx, name)
	got = slices.DeleteFunc(got, func(e hcn.Endpoint) bool { return e.Name != name })
	if err != nil || len(got) != 1 {
		add("selftest: read back", Fail, fmt.Sprintf("HNS lists %d endpoints named %s (%v)", len(got), name, err), "")
		return r
	}
	var diffs []string
	differ := func(field string, sent, read any) {
		diffs = append(diffs, fmt.Sprintf("%s: sent %v, HNS has %v", field, sent, read))
	}
	back := got[0]
	if !strings.EqualFold(back.NetworkID, network.ID) {
		differ("network", network.ID, back.NetworkID)
	}
	if back.Namespace != ns {
		differ("namespace", ns, back.Namespace)
	}
	var notes []string
	switch { // compared as the plugin compares them (hcn.SameBehaviour)
	case !hcn.SameBehaviour(back.PortMappings, policies):
		differ("port mappings", policies, back.PortMappings)
	case !hcn.SamePolicies(back.PortMappings, policies):
		notes = append(notes, fmt.Sprintf("port mappings read back as %v (sent %v: the same behaviour)", back.PortMappings, policies))
	}
	routesDropped := len(back.Routes) == 0 && len(routes) > 0
	if !routesDropped && !hcn.SameRoutes(back.Routes, routes) {
		differ("routes", routes, back.Routes)
	}
	if !slices.Equal(back.DNS.ServerList, selfTestDNS().ServerList) {
		differ("DNS servers", selfTestDNS().ServerList, back.DNS.ServerList)
	}
	if !slices.Equal(back.DNS.Search, selfTestDNS().Search) {
		notes = append(notes, fmt.Sprintf("DNS search list read back as %v (sent %v)", back.DNS.Search, selfTestDNS().Search))
	}
	if back.OutboundNAT != c.OutboundNAT {
		differ("OutBoundNAT", c.OutboundNAT, back.OutboundNAT)
	}
	if nsBack, err := d.HNS.GetNamespace(sctx, ns); err != nil {
		differ("namespace's endpoints", ep.ID, err)
	} else if !slices.ContainsFunc(nsBack.Endpoints, func(e string) bool { return strings.EqualFold(e, ep.ID) }) {
		differ("namespace's endpoints", ep.ID, nsBack.Endpoints)
	}
	if len(diffs) > 0 {
		add("selftest: read back", Fail, strings.Join(diffs, "; "), "HNS does not keep what the plugin sends: report it with this output")
		return r
	}
	if routesDropped { // an HNS build before endpoint routes (windows-container-networking PR 116)
		add("selftest: read back", Warn, fmt.Sprintf("routes: sent %v, HNS has [] (this HNS does not store endpoint routes); the rest as sent", routes),
			"hcn.default_route cannot take effect on this HNS build: the endpoint gets HNS's own default route, which may compete with the pod's; "+
				"a newer Windows build stores endpoint routes")
		return r
	}
	detail := fmt.Sprintf("network, namespace, %d port mapping(s), routes %v, DNS %s, OutBoundNAT %v: as sent",
		len(policies), routes, selfTestDNS(), c.OutboundNAT)
	if len(notes) > 0 {
		detail += "; " + strings.Join(notes, "; ")
	}
	add("selftest: read back", Pass, detail, "")
	return r
}

// selfTestDNS is the DNS the self-test's endpoint carries, as a pod's does
// (the plugin gives its endpoint the pod's own: kubelet's cluster resolver
// and search list).
func selfTestDNS() hcn.DNS {
	return hcn.DNS{ServerList: []string{"10.96.0.10"}, Search: []string{"default.svc.cluster.local", "svc.cluster.local"}}
}

// removeLeftovers deletes endpoints an earlier self-test left (a kept one,
// or a crash), with the namespaces they name.
func (d *Doctor) removeLeftovers(ctx context.Context) (int, error) {
	eps, err := d.HNS.ListEndpoints(ctx)
	if err != nil {
		return 0, err
	}
	mgr := hcn.NewManager(d.HNS, hcn.ManagerConfig{Prefix: SelfTestPrefix})
	n := 0
	for _, ep := range eps {
		if !strings.HasPrefix(ep.Name, SelfTestPrefix) {
			continue
		}
		if _, err := mgr.Apply(ctx, hcn.Removal([]hcn.Endpoint{ep})); err != nil {
			return n, err
		}
		if ep.Namespace != "" {
			if err := d.HNS.RemoveNamespace(ctx, ep.Namespace); err != nil && !errors.Is(err, hcn.ErrNotFound) {
				return n, err
			}
		}
		n++
	}
	return n, nil
}

func fixFor(err error, port uint16) string {
	switch {
	case errors.Is(err, hcn.ErrPortInUse):
		return fmt.Sprintf("host port %d is taken: run the self-test with another --port", port)
	case errors.Is(err, hcn.ErrInvalid):
		return "HNS refused what the plugin sends: check hcn.* against the network"
	}
	return "see the HNS and network checks"
}

func randomID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
