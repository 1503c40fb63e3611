package containerd

import (
	"slices"
	"testing"

	apievents "github.com/containerd/containerd/api/events"
)

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name string
		ev   any
		id   string
		want Action
	}{
		{"task start", &apievents.TaskStart{ContainerID: "sb", Pid: 7}, "sb", Start},
		{"init exit, ID set", &apievents.TaskExit{ContainerID: "sb", ID: "sb"}, "sb", Exit},
		{"init exit, no ID", &apievents.TaskExit{ContainerID: "sb"}, "sb", Exit},
		{"an exec's exit in the sandbox container", &apievents.TaskExit{ContainerID: "sb", ID: "exec-1"}, "", Ignore},
		{"task delete without ID (containerd 2.x)", &apievents.TaskDelete{ContainerID: "sb"}, "sb", Exit},
		{"an exec's delete", &apievents.TaskDelete{ContainerID: "sb", ID: "exec-1"}, "", Ignore},
		{"container delete", &apievents.ContainerDelete{ID: "sb"}, "sb", Removed},
		{"container create", &apievents.ContainerCreate{ID: "sb"}, "", Ignore},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if id, a := Decode(tc.ev); id != tc.id || a != tc.want {
				t.Fatalf("Decode = %q, %v; want %q, %v", id, a, tc.id, tc.want)
			}
		})
	}
}

// The subscription covers every topic the source acts on, only in the
// configured containerd namespace.
func TestFilters(t *testing.T) {
	got := Filters("k8s.io")
	for _, topic := range []string{TopicTaskStart, TopicTaskExit, TopicTaskDelete, TopicContainerDelete, TopicProbe} {
		want := `namespace=="k8s.io",topic=="` + topic + `"`
		if !slices.Contains(got, want) {
			t.Errorf("filters %q lack %q", got, want)
		}
	}
	if len(got) != 5 {
		t.Errorf("filters %q: want exactly the five topics", got)
	}
}
