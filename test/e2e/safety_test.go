package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/doctor"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/harness"
)

func TestAdmissionPolicy(t *testing.T) {
	env, ctx := newEnv(t, `[plugin]
mapping_sources = ["annotations", "cri"]

[admission]
namespaces = ["ingress"]
host_port_ranges = ["443", "1024-65535"]
pod_security = "off"
network_policy = "off"
`+harness.HCNConfig)
	if err := env.StartPlugin(ctx); err != nil {
		t.Fatal(err)
	}
	ingress := func(name, annotation string) harness.Pod {
		p := pod(name, annotation)
		p.Namespace = "ingress"
		return p
	}
	cri := ingress("kubelet-port", "")
	cri.HostPorts = []*runtimeapi.PortMapping{hostPort(runtimeapi.Protocol_TCP, 80, 10250, "")}
	tests := []struct {
		pod  harness.Pod
		want []string // "" = admitted
	}{
		{ingress("web", "8080:80, 443:8443"), nil},
		{pod("elsewhere", "8081:80"), []string{"default/elsewhere", `admission.namespaces (namespace "default" is not listed)`}},
		{ingress("rdp", "8082:80, 3389:3389"), []string{"ingress/rdp", "mapping 3389:3389/tcp", `admission.deny[0] = "3389"`}},
		{ingress("winrm", "5986:5986/tcp"), []string{"mapping 5986:5986/tcp", `"5985-5986"`}},
		{ingress("low", "80:80"), []string{"mapping 80:80/tcp", "admission.host_port_ranges", "host port 80 is outside"}},
		{cri, []string{"ingress/kubelet-port", "mapping 10250:80/tcp", `"10248-10250"`}},
	}
	for _, tt := range tests {
		t.Run(tt.pod.Name, func(t *testing.T) {
			guid, err := env.RunPod(ctx, tt.pod)
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				wantEndpoint(t, ctx, env, tt.pod.ID, guid, []hcn.PortMappingPolicy{tcp(8080, 80, "", 1), tcp(443, 8443, "", 1)})
				return
			}
			if err == nil {
				t.Fatal("admitted")
			}
			for _, w := range append(tt.want, "denied by the host-port admission policy") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if ep := endpointOf(t, ctx, env, tt.pod.ID); ep != nil {
				t.Fatalf("denied pod got %+v", ep)
			}
		})
	}
}

func TestConflictsAcrossPodsAndRestarts(t *testing.T) {
	env, ctx := startEnv(t)
	holder := pod("holder", "10.0.0.4:8700:80, 8701:80/udp")
	holderNS, err := env.RunPod(ctx, holder)
	if err != nil {
		t.Fatal(err)
	}
	wantEndpoint(t, ctx, env, holder.ID, holderNS, []hcn.PortMappingPolicy{tcp(8700, 80, "10.0.0.4", 1),
		{Protocol: hcn.UDP, ExternalPort: 8701, InternalPort: 80, Flags: 1}})

	creates := func() int {
		_, calls, err := env.SimClient.State(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return calls[hcnsim.OpCreateEndpoint]
	}
	check := func(t *testing.T) {
		t.Helper()
		before := creates()
		for _, tt := range []struct{ name, annotation, want string }{
			{"wildcard-over-specific", "8700:81", "10.0.0.4:8700->80/tcp"},
			{"same-udp", "10.0.0.9:8701:81/udp", "*:8701->80/udp"},
		} {
			p := pod(tt.name+"-"+t.Name(), tt.annotation)
			_, err := env.RunPod(ctx, p)
			if err == nil || !strings.Contains(err.Error(), "already held by pod default/holder") {
				t.Errorf("RunPodSandbox(%s) = %v, want a conflict naming default/holder", tt.annotation, err)
			}
		}
		if n := creates(); n != before {
			t.Errorf("HNS was asked to create %d endpoints for conflicting pods", n-before)
		}
		// within one pod
		if _, err := env.RunPod(ctx, pod("self-"+strings.ReplaceAll(t.Name(), "/", "-"), "8702:80, 10.0.0.4:8702:81")); err == nil || !strings.Contains(err.Error(), "overlaps entry") {
			t.Errorf("overlapping mappings within a pod: %v", err)
		}
		// a free port on another address is fine
		ok := pod("neighbour-"+strings.ReplaceAll(t.Name(), "/", "-"), "10.0.0.5:8700:80")
		if _, err := env.RunPod(ctx, ok); err != nil {
			t.Errorf("a different host IP: %v", err)
		}
		if err := env.RemovePod(ctx, ok); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("while running", check)
	env.Plugin.Kill()
	if err := env.StartPlugin(ctx); err != nil {
		t.Fatal(err)
	}
	t.Run("after a restart", check) // the index is rebuilt from HCN, the name from containerd
}

func TestSlowHCNNeverTimesOutNRI(t *testing.T) {
	for _, policy := range []string{"fail-closed", "fail-open"} {
		t.Run(policy, func(t *testing.T) {
			env, ctx := newEnv(t, `[plugin]
failure_policy = "`+policy+`"
deadline = "800ms"
`+harness.NetworkConfig)
			if err := env.StartPlugin(ctx); err != nil {
				t.Fatal(err)
			}
			// warm up: the network exists, so only endpoint calls remain
			warm := pod("warm-"+policy, "8800:80")
			if _, err := env.RunPod(ctx, warm); err != nil {
				t.Fatal(err)
			}
			// each HNS call now takes 700 ms; a start needs at least three, more than NRI's 2 s
			if err := env.SimClient.SetLatency(ctx, 700*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			slow := pod("slow-"+policy, "8801:80")
			guid, err := env.RunPod(ctx, slow)
			if policy == "fail-closed" {
				if err == nil || !strings.Contains(err.Error(), "HCN did not finish within the deadline") {
					t.Fatalf("RunPodSandbox: %v, want the plugin's deadline error", err)
				}
				wantNoEndpoint(t, ctx, env, slow.ID)
			} else {
				if err != nil {
					t.Fatalf("RunPodSandbox: %v", err)
				}
				wantEndpoint(t, ctx, env, slow.ID, guid, []hcn.PortMappingPolicy{tcp(8801, 80, "", 1)})
			}
			// a slow stop does not time out either
			if err := env.StopPod(ctx, warm, ""); err != nil {
				t.Fatalf("StopPodSandbox: %v", err)
			}
			if err := env.SimClient.SetLatency(ctx, 0); err != nil {
				t.Fatal(err)
			}
			wantNoEndpoint(t, ctx, env, warm.ID)
			if policy == "fail-closed" {
				// nothing of the failed pod is left in HCN at all
				st, _, err := env.SimClient.State(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(st.Endpoints) != 0 {
					t.Fatalf("HCN holds %+v", st.Endpoints)
				}
			}
			// the plugin is still connected and answering
			after := pod("after-"+policy, "8802:80")
			afterNS, err := env.RunPod(ctx, after)
			if err != nil {
				t.Fatal(err)
			}
			wantEndpoint(t, ctx, env, after.ID, afterNS, []hcn.PortMappingPolicy{tcp(8802, 80, "", 1)})
			for _, inv := range env.Invocations() {
				if isTimeout(inv.Err) {
					t.Errorf("the runtime timed out %s of %s: %v", inv.Operation, inv.Plugin, inv.Err)
				}
			}
			if !env.Plugin.Running() {
				t.Fatal("plugin exited")
			}
		})
	}
}

func isTimeout(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if s, ok := status.FromError(err); ok && s.Code() == codes.DeadlineExceeded {
		return true
	}
	return strings.Contains(strings.ToLower(err.Error()), "deadline exceeded") || strings.Contains(err.Error(), "timed out")
}

// Issue 46: whoever binds the admin address first does not answer for the
// plugin. A program on it while the plugin restarts makes run fail, naming
// the address and the process that holds it; health, doctor and status
// refuse its answer (it cannot prove it is the plugin's: the key of the
// plugin's last start, which the failed run leaves as it was, issue 54),
// and cleanup, which a running plugin stops, runs, naming it.
func TestAProgramOnTheAdminAddressAnswersForNobody(t *testing.T) {
	env, ctx := newEnv(t, harness.NetworkConfig)
	// the plugin's last start, which wrote its key
	if err := env.StartPlugin(ctx); err != nil {
		t.Fatal(err)
	}
	env.Plugin.Stop()
	l, err := net.Listen("tcp", env.AdminAddr)
	if err != nil {
		t.Fatal(err)
	}
	squatter := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"status": "ok", "checks": {"event source": "ok"}}`))
	}), ReadHeaderTimeout: time.Second}
	go squatter.Serve(l)
	t.Cleanup(func() { squatter.Close() })

	if err := env.StartProcess(ctx, "plugin", env.PluginArgs("run")...); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := env.Plugin.Wait(wctx); err != nil {
		t.Fatalf("the plugin runs while another program holds its admin address: %v", err)
	}
	if log := env.Plugin.Tail(10); !strings.Contains(log, `admin.listen = "`+env.AdminAddr+`" cannot be served`) ||
		!strings.Contains(log, fmt.Sprintf("held by process %d", os.Getpid())) {
		t.Fatalf("run's refusal does not name the address and its holder (process %d):\n%s", os.Getpid(), log)
	}
	for _, cmd := range []string{"health", "status"} {
		out, stderr, err := env.Command(ctx, cmd)
		if cmd == "health" && (err == nil || !strings.Contains(stderr, "another program holds the plugin's address")) {
			t.Errorf("health against another program: %v\n%s%s; want refused, saying so", err, out, stderr)
		}
		if cmd == "status" && !strings.Contains(stderr, "another program holds the plugin's address") {
			t.Errorf("status against another program: %v\n%s; want its answer refused, saying so", err, stderr)
		}
	}
	out, _, _ := env.Command(ctx, "doctor", "-o", "json")
	var rep doctor.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("doctor -o json: %v\n%s", err, out)
	}
	for _, r := range rep.Results {
		if r.Check == "admin address" && (r.Status != doctor.Fail || !strings.Contains(r.Detail, "answered by another program")) {
			t.Errorf("doctor's admin address: %s %q, want fail, answered by another program", r.Status, r.Detail)
		}
		if r.Check == "event subscription" && r.Status == doctor.Pass {
			t.Errorf("doctor takes another program's answer for the plugin's: %s %q", r.Status, r.Detail)
		}
	}
	if out, stderr, err := env.Command(ctx, "cleanup"); err != nil || !strings.Contains(stderr, "another program holds the plugin's address") {
		t.Errorf("cleanup with another program on the plugin's address: %v\n%s%s; want it run, naming it", err, out, stderr)
	}
}

// Issue 54: a second run beside the running plugin (the same
// configuration, tried in a console while the service runs) fails to bind
// and changes nothing the running plugin proves: health still verifies it,
// and cleanup still refuses to run under it.
func TestASecondRunLeavesTheRunningPluginProvable(t *testing.T) {
	env, ctx := newEnv(t, harness.NetworkConfig)
	if err := env.StartPlugin(ctx); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, stderr, err := env.Command(cctx, "run"); err == nil || !strings.Contains(stderr, "cannot be served") {
		t.Fatalf("a second run: %v\n%s; want it refused, naming the address", err, stderr)
	}
	if out, stderr, err := env.Command(ctx, "health"); err != nil || !strings.Contains(out, `"status": "ok"`) {
		t.Fatalf("health after a second run: %v\n%s%s; want the running plugin verified", err, out, stderr)
	}
	if _, stderr, err := env.Command(ctx, "cleanup"); err == nil || !strings.Contains(stderr, "the plugin still runs") {
		t.Fatalf("cleanup after a second run: %v\n%s; want it refused while the plugin runs", err, stderr)
	}
}
