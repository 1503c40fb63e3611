package e2e

import (
	"fmt"
	"os"
	"reflect"
	"strconv"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

// Issue 38, end to end on containerd's event path (the Windows path): a
// pod whose CRI record has no DNS gets the DNS of its CNI's endpoint on
// ours, nothing of the node's; a pod with DNS gets its own, its first
// search domain as the suffix. Then an upgrade: endpoints built as the
// earlier releases built them (no DNS sent; the pod's resolvers without
// a suffix), before the plugin starts, are adopted, none rebuilt, and
// status and the gauge name them as carrying DNS other than the pod's.
func TestAPodsDNSIsItsOwnOrItsCNIsAndAnUpgradeRebuildsNone(t *testing.T) {
	env, ctx := newEnv(t, "")
	cfg := config.Default()
	raw, err := os.ReadFile(env.ConfigPath)
	must(t, err)
	must(t, config.Decode(env.ConfigPath, raw, &cfg))
	opt, err := plugin.OptionsFrom(cfg)
	must(t, err)
	// the earlier releases' endpoints, built through the manager as they
	// built them, for two running sandboxes, before the plugin starts
	old := hcn.NewManager(env.SimClient, plugin.ManagerConfig(cfg.HCN))
	shapes := map[string]hcn.DNS{"upgraded-none": {}, "upgraded-no-suffix": {ServerList: []string{"10.96.0.10"},
		Search: []string{"default.svc.cluster.local", "svc.cluster.local", "cluster.local"}, Options: []string{"ndots:5"}}}
	built := map[string]string{}
	port := 9320
	for name, dns := range shapes {
		port++
		ann := strconv.Itoa(port) + ":80"
		p := pod(name, ann)
		guid, err := env.CreateSandbox(ctx, p)
		must(t, err)
		ms, err := request.ParsePortMappings(ann, opt.Limits)
		must(t, err)
		ep, _, err := old.Ensure(ctx, hcn.Desired{SandboxID: p.ID, Namespace: guid, Policies: request.BuildPolicies(ms, opt.Policy), DNS: dns})
		must(t, err)
		built[p.ID] = ep.ID
	}
	must(t, env.StartPluginEvents(ctx))

	// a pod whose record has no DNS, its CNI's endpoint with DNS
	cniDNS := hcn.DNS{Domain: "cni.example", Search: []string{"default.svc.cluster.local"}, ServerList: []string{"10.96.0.11"}}
	bridge, err := env.SimClient.CreateNetwork(ctx, hcn.NetworkSpec{Name: "cbr0", Type: hcn.NetworkL2Bridge, Subnet: "10.246.0.0/24", Gateway: "10.246.0.1"})
	must(t, err)
	bare := pod("dns-none", "9330:80")
	bare.DNS = nil
	guid, err := env.CreateSandbox(ctx, bare)
	must(t, err)
	cni, err := env.SimClient.CreateEndpoint(ctx, hcn.EndpointSpec{Name: "cbr0_" + bare.ID, NetworkID: bridge.ID, DNS: cniDNS})
	must(t, err)
	must(t, env.SimClient.AddNamespaceEndpoint(ctx, guid, cni.ID))
	must(t, env.PublishStart(ctx, bare.ID))
	bareEP := wantEndpoint(t, ctx, env, bare.ID, guid, []hcn.PortMappingPolicy{tcp(9330, 80, "", 1)})
	// a pod with its own DNS
	own := pod("dns-own", "9331:80")
	ownNS, err := env.CreateSandbox(ctx, own)
	must(t, err)
	must(t, env.PublishStart(ctx, own.ID))
	ownEP := wantEndpoint(t, ctx, env, own.ID, ownNS, []hcn.PortMappingPolicy{tcp(9331, 80, "", 1)})

	st, _, err := env.SimClient.State(ctx)
	must(t, err)
	dnsOf := map[string]hcn.DNS{}
	for _, ep := range st.Endpoints {
		dnsOf[ep.ID] = ep.DNS
	}
	if got := dnsOf[bareEP.Endpoint]; !reflect.DeepEqual(got, cniDNS) {
		t.Errorf("a pod without DNS in its record: our endpoint carries %+v, want its CNI endpoint's %+v", got, cniDNS)
	}
	wantOwn := hcn.DNS{Domain: "default.svc.cluster.local", Search: own.DNS.Searches, ServerList: own.DNS.Servers, Options: own.DNS.Options}
	if got := dnsOf[ownEP.Endpoint]; !reflect.DeepEqual(got, wantOwn) {
		t.Errorf("a pod with DNS: our endpoint carries %+v, want %+v", got, wantOwn)
	}

	// the upgrade: adopted, none rebuilt, reported
	err = harness.Eventually(ctx, 20*time.Second, func() error {
		entries, err := env.Status(ctx)
		if err != nil {
			return err
		}
		foreign := 0
		for _, e := range entries {
			if id, ok := built[e.Sandbox]; ok {
				if e.Endpoint != id {
					t.Fatalf("%s: endpoint %s after the upgrade, want %s kept", e.Pod, e.Endpoint, id)
				}
				if e.ForeignDNS {
					foreign++
				}
			} else if e.ForeignDNS {
				t.Fatalf("%s reported as carrying DNS other than its own: %+v", e.Pod, e)
			}
		}
		if foreign != len(built) {
			return fmt.Errorf("%d of the upgraded endpoints reported as carrying DNS other than the pod's, want %d", foreign, len(built))
		}
		return nil
	})
	must(t, err)
	waitMetric(t, env, "nri_hcn_portmap_pods_foreign_dns", float64(len(built)))
	// and none is rebuilt over a window, not only at the first look
	err = harness.Consistently(ctx, 2*time.Second, func() error {
		if n := scrape(t, env)[`nri_hcn_portmap_reconcile_repairs_total{action="created"}`]; n != 0 {
			return fmt.Errorf("the plugin rebuilt %v endpoints after the upgrade", n)
		}
		for id, ep := range built {
			if e := endpointOf(t, ctx, env, id); e == nil || e.Endpoint != ep {
				return fmt.Errorf("sandbox %s: endpoint %+v, want %s kept", id, e, ep)
			}
		}
		return nil
	})
	must(t, err)
}

// Issue 45: a pod without a DNS config of its own gets, on its endpoint,
// the DNS the CNI reported for its interface, read from the record the
// plugin reads anyway, with no HNS lookup of its namespace. The record is
// a real one: containerd's own CRI runs the pod on a pod network (the
// fake CNI plugin reports an address and DNS), and writes its CNI result
// into the sandbox's metadata as this containerd line writes it (make test
// runs 2.4, make compat 1.7); the plugin is then given a Windows sandbox
// with that record.
func TestTheCNIsDNSComesFromTheRecordWithoutAskingHNS(t *testing.T) {
	env, ctx := newEnvWith(t, harness.Options{Config: eventsConfig, ContainerdNRI: true, CNI: true})
	must(t, env.ImportPauseImage(ctx))
	cri, closeCRI, err := env.CRI()
	must(t, err)
	t.Cleanup(closeCRI)
	run, err := cri.RunPodSandbox(ctx, &runtimeapi.RunPodSandboxRequest{Config: env.PodNetworkPod("cni-dns", map[string]string{request.AnnotationPortMappings: "9340:80"})})
	if err != nil {
		t.Fatalf("CRI RunPodSandbox on the fake CNI's network: %v\n%s", err, env.Containerd.Tail(30))
	}
	record, err := env.SandboxMetadata(ctx, run.PodSandboxId)
	must(t, err)
	_, _ = cri.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: run.PodSandboxId})
	_, _ = cri.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: run.PodSandboxId})
	servers, search := harness.FakeCNIDNS()
	if meta, err := request.DecodeCRIMetadata(record); err != nil || !reflect.DeepEqual(meta.CNIDNS.ServerList, servers) || len(meta.DNS.ServerList) != 0 {
		t.Fatalf("containerd %s's record: %v, %+v; want the CNI's DNS and none of the pod's\n%s", env.ContainerdVersion(), err, meta, record)
	}

	must(t, env.StartPluginEvents(ctx))
	p := pod("cni-dns", "9340:80")
	p.RawMetadata = record // containerd's record, with a Windows namespace of its own
	guid, err := env.CreateSandbox(ctx, p)
	must(t, err)
	_, before, err := env.SimClient.State(ctx)
	must(t, err)
	must(t, env.PublishStart(ctx, p.ID))
	ep := wantEndpoint(t, ctx, env, p.ID, guid, []hcn.PortMappingPolicy{tcp(9340, 80, "", 1)})
	st, after, err := env.SimClient.State(ctx)
	must(t, err)
	want := hcn.DNS{ServerList: servers, Search: search, Domain: search[0]}
	for _, e := range st.Endpoints {
		if e.ID == ep.Endpoint && !reflect.DeepEqual(e.DNS, want) {
			t.Errorf("the endpoint carries DNS %+v, want the CNI's %+v", e.DNS, want)
		}
	}
	if n := after[hcnsim.OpGetNamespace] - before[hcnsim.OpGetNamespace]; n != 0 {
		t.Errorf("HNS was asked for the namespace %d times for a pod whose record holds its DNS", n)
	}
}
