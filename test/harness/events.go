// containerd events published as containerd publishes them.

package harness

import (
	"context"
	"fmt"

	apievents "github.com/containerd/containerd/api/events"

	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/containerd"
)

// Publish sends an event into containerd's k8s.io namespace, as containerd
// itself does when a task starts or stops.
func (e *Env) Publish(ctx context.Context, topic string, ev any) error {
	return e.PublishIn(ctx, K8s, topic, ev)
}

// PublishIn sends an event into the given containerd namespace.
func (e *Env) PublishIn(ctx context.Context, namespace, topic string, ev any) error {
	if err := e.Ctr.EventService().Publish(namespaces.WithNamespace(ctx, namespace), topic, ev); err != nil {
		return fmt.Errorf("publishing %s in %s: %w", topic, namespace, err)
	}
	return nil
}

// PublishStart publishes /tasks/start of a sandbox.
func (e *Env) PublishStart(ctx context.Context, id string) error {
	return e.Publish(ctx, containerd.TopicTaskStart, &apievents.TaskStart{ContainerID: id, Pid: 4242})
}

// PublishExit publishes /tasks/exit of a sandbox's init process.
func (e *Env) PublishExit(ctx context.Context, id string) error {
	return e.Publish(ctx, containerd.TopicTaskExit, &apievents.TaskExit{ContainerID: id, ID: id, Pid: 4242, ExitStatus: 0})
}

// PublishTaskDelete publishes /tasks/delete of a sandbox.
func (e *Env) PublishTaskDelete(ctx context.Context, id string) error {
	return e.Publish(ctx, containerd.TopicTaskDelete, &apievents.TaskDelete{ContainerID: id, ID: id, Pid: 4242})
}

// PublishContainerDelete publishes /containers/delete.
func (e *Env) PublishContainerDelete(ctx context.Context, id string) error {
	return e.Publish(ctx, containerd.TopicContainerDelete, &apievents.ContainerDelete{ID: id})
}
