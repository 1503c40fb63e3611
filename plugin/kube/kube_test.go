package kube

import (
	"errors"
	"testing"

	"github.com/sirupsen/logrus"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
)

type counts struct {
	dropped int
	reports map[string]int
}

func (c *counts) KubeReport(what, result string) { c.reports[what+"/"+result]++ }
func (c *counts) KubeDropped()                   { c.dropped++ }

// TestQueueDropsTheOldest: reports wait in a bounded queue; when it is full
// the oldest goes, counted, and Report never blocks (no API server runs
// here, and none is needed to queue).
func TestQueueDropsTheOldest(t *testing.T) {
	c := &counts{reports: map[string]int{}}
	client := kubernetes.NewForConfigOrDie(&rest.Config{Host: "http://127.0.0.1:1"})
	r := New(Options{Client: client, Node: "n1", QueueSize: 2, Metrics: c, Log: logrus.NewEntry(logrus.New())})
	for _, name := range []string{"a", "b", "c"} {
		r.Report(plugin.PodReport{Pod: plugin.Pod{Name: name, Namespace: "default"}, Reason: plugin.ReasonHNS, Err: errors.New("x")})
	}
	if c.dropped != 1 {
		t.Fatalf("dropped %d, want 1", c.dropped)
	}
	var left []string
	for {
		it, ok := r.pop()
		if !ok {
			break
		}
		left = append(left, it.rep.Pod.Name)
	}
	if len(left) != 2 || left[0] != "b" || left[1] != "c" {
		t.Fatalf("queue holds %v, want the newest two [b c]", left)
	}
}

// TestRepeatsAreNotQueued: an outcome already reported for the pod (every
// resync reports each mapped pod again) takes no place in the queue.
func TestRepeatsAreNotQueued(t *testing.T) {
	c := &counts{reports: map[string]int{}}
	client := kubernetes.NewForConfigOrDie(&rest.Config{Host: "http://127.0.0.1:1"})
	r := New(Options{Client: client, Node: "n1", QueueSize: 1, Metrics: c, Log: logrus.NewEntry(logrus.New())})
	mapped := plugin.PodReport{Pod: plugin.Pod{Name: "web", Namespace: "default"}, Mapped: true, Endpoint: "EP1"}
	r.last[reportKey(mapped)] = state(mapped) // as after a successful send
	r.Report(mapped)
	if _, ok := r.pop(); ok {
		t.Fatal("a repeated outcome was queued")
	}
	failed := plugin.PodReport{Pod: mapped.Pod, Reason: plugin.ReasonHNS, Err: errors.New("x")}
	r.Report(failed)
	if it, ok := r.pop(); !ok || it.rep.Mapped {
		t.Fatalf("a new outcome was not queued: %+v %v", it, ok)
	}
	if c.dropped != 0 {
		t.Errorf("dropped %d", c.dropped)
	}
}
