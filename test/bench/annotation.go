package bench

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/hcn/hcnsim"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/request"
)

// AnnotationSizes are the annotation sizes measured, up to the 256 KiB
// Kubernetes allows for all of a pod's annotations.
func AnnotationSizes() []int { return []int{1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10} }

// Annotation returns a port-mappings annotation of about size bytes in the
// given form ("compact" or "list"), every entry valid and distinct: what a
// hostile but careful pod author could write.
func Annotation(form string, size int) string {
	var b strings.Builder
	sep := ""
	if form == "list" {
		b.WriteString("[")
	}
	for i := 0; b.Len() < size-64; i++ {
		b.WriteString(sep)
		sep = ","
		ip := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		if form == "list" {
			fmt.Fprintf(&b, `{"containerPort":80,"hostPort":%d,"hostIP":%q}`, 1024+i%60000, ip)
		} else {
			fmt.Fprintf(&b, "%s:%d:80", ip, 1024+i%60000)
		}
	}
	if form == "list" {
		b.WriteString("]")
	}
	return b.String()
}

// AnnotationCost is what one annotation costs.
type AnnotationCost struct {
	Form    string
	Bytes   int
	Entries int           // mappings in it
	Parse   time.Duration // the parser with no limits: grows linearly
	Decide  time.Duration // a pod start with the default limits, decided
}

// decisionStore holds one sandbox without a Windows namespace, so a start
// is decided (parse, containerd lookup, admission) without building
// anything.
type decisionStore struct{}

func (decisionStore) Sandbox(_ context.Context, id string) (*plugin.SandboxInfo, error) {
	return &plugin.SandboxInfo{ID: id, IsSandbox: true}, nil
}
func (decisionStore) TaskState(context.Context, string) (plugin.TaskState, error) {
	return plugin.TaskRunning, nil
}
func (decisionStore) ListSandboxes(context.Context) ([]string, error) { return nil, nil }

// DecisionCore is a core with the default limits and admission policy over
// a store whose sandbox has no Windows namespace.
func DecisionCore() *plugin.Core {
	cfg := config.Default()
	opt, err := plugin.OptionsFrom(cfg)
	if err != nil {
		panic(err) // the defaults compile; the admission tests say so
	}
	opt.Inputs = plugin.Inputs{Annotations: true}
	log := logrus.New()
	log.SetLevel(logrus.PanicLevel)
	mgr := hcn.NewManager(hcnsim.New(), plugin.ManagerConfig(cfg.HCN))
	return plugin.NewCore(mgr, decisionStore{}, opt, logrus.NewEntry(log))
}

// StartDecision times one pod start of a pod carrying annotation v.
func StartDecision(c *plugin.Core, v string) func(b *testing.B) {
	return func(b *testing.B) {
		p := plugin.Pod{ID: "hostile", Name: "hostile", Namespace: "default",
			Annotations: map[string]string{request.AnnotationPortMappings: v}}
		for b.Loop() {
			_ = c.StartPod(context.Background(), p)
		}
	}
}

// ParseUnlimited times the parser with no limits.
func ParseUnlimited(v string) func(b *testing.B) {
	return func(b *testing.B) {
		b.SetBytes(int64(len(v)))
		for b.Loop() {
			_, _ = request.ParsePortMappings(v, request.Limits{})
		}
	}
}

// MeasureAnnotations measures every form and size.
func MeasureAnnotations() []AnnotationCost {
	c := DecisionCore()
	defer c.Close()
	var out []AnnotationCost
	for _, form := range []string{"compact", "list"} {
		for _, size := range AnnotationSizes() {
			v := Annotation(form, size)
			ms, _ := request.ParsePortMappings(v, request.Limits{})
			out = append(out, AnnotationCost{Form: form, Bytes: len(v), Entries: len(ms),
				Parse:  time.Duration(testing.Benchmark(ParseUnlimited(v)).NsPerOp()),
				Decide: time.Duration(testing.Benchmark(StartDecision(c, v)).NsPerOp())})
		}
	}
	return out
}
