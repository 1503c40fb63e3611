package kube

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// API is what the reporter asks of the API server: the process boundary,
// and the seam of the unit tests. It reads no pod: the plugin's token has
// no get on pods.
type API interface {
	CreateEvent(ctx context.Context, ev *eventsv1.Event) error
	// PatchPodStatus applies a strategic merge patch to pods/status.
	PatchPodStatus(ctx context.Context, namespace, name string, patch []byte) error
}

// RESTAPI is API over the API server's REST interface, with client-go's
// configuration and transport (TLS, tokens, in-cluster token rotation) but
// not its generated clientset: that links and registers every API group of
// Kubernetes, which doubled the plugin's idle memory for three calls.
type RESTAPI struct {
	base   *url.URL
	client *http.Client
	agent  string
}

var _ API = (*RESTAPI)(nil)

// NewRESTAPI returns the API at rc's server. Nothing is dialled yet.
func NewRESTAPI(rc *rest.Config) (*RESTAPI, error) {
	base, _, err := rest.DefaultServerUrlFor(rc)
	if err != nil {
		return nil, fmt.Errorf("API server address %q: %w", rc.Host, err)
	}
	client, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("API server client: %w", err)
	}
	return &RESTAPI{base: base, client: client, agent: rc.UserAgent}, nil
}

// CreateEvent implements API.
func (a *RESTAPI) CreateEvent(ctx context.Context, ev *eventsv1.Event) error {
	body, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	err = a.do(ctx, http.MethodPost, "/apis/events.k8s.io/v1/namespaces/"+url.PathEscape(ev.Namespace)+"/events", "application/json", body, nil)
	if err != nil {
		return fmt.Errorf("creating event %s/%s: %w", ev.Namespace, ev.Name, err)
	}
	return nil
}

// ProbeNodeRestriction asks the API server, in a dry run that persists
// nothing, to create an event signed as another node's plugin: the chart's
// node-restriction policy refuses it (held), an API server without it
// takes it (not held). An error: it cannot tell (the API server, RBAC).
func (a *RESTAPI) ProbeNodeRestriction(ctx context.Context, node string) (held bool, err error) {
	now := time.Now()
	ev := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("nri-hcn-portmap-probe.%x", now.UnixNano()), Namespace: "default"},
		EventTime: metav1.NewMicroTime(now), ReportingController: Controller, ReportingInstance: "nri-hcn-portmap-" + node + "-not-this-node",
		Action: Action, Reason: "NodeRestrictionProbe", Type: "Normal", Note: "a dry run by nri-hcn-portmap doctor",
		Regarding: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: "default", Name: "nri-hcn-portmap-probe"}}
	body, err := json.Marshal(ev)
	if err != nil {
		return false, err
	}
	err = a.do(ctx, http.MethodPost, "/apis/events.k8s.io/v1/namespaces/default/events?dryRun=All", "application/json", body, nil)
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, ErrDenied) && strings.Contains(err.Error(), "may create only its own events"):
		return true, nil
	}
	return false, err
}

// PatchPodStatus implements API.
func (a *RESTAPI) PatchPodStatus(ctx context.Context, namespace, name string, patch []byte) error {
	err := a.do(ctx, http.MethodPatch, "/api/v1/namespaces/"+url.PathEscape(namespace)+"/pods/"+url.PathEscape(name)+"/status",
		"application/strategic-merge-patch+json", patch, nil)
	if err != nil {
		return fmt.Errorf("patching the status of pod %s/%s: %w", namespace, name, err)
	}
	return nil
}

// do sends one request; a non-2xx answer is an ErrAPI error carrying the
// API server's own message (a metav1.Status) and code.
func (a *RESTAPI) do(ctx context.Context, method, path, contentType string, body []byte, into any) error {
	res, err := a.send(ctx, method, path, "application/json", contentType, body)
	if err != nil {
		return err
	}
	return decode(res, into)
}

// doAccept is do for a GET asking for accept.
func (a *RESTAPI) doAccept(ctx context.Context, method, path, accept string, into any) error {
	res, err := a.send(ctx, method, path, accept, "", nil)
	if err != nil {
		return err
	}
	return decode(res, into)
}

// send sends one request and returns the answer, whatever its status.
func (a *RESTAPI) send(ctx context.Context, method, path, accept, contentType string, body []byte) (*http.Response, error) {
	u := *a.base
	p, query, _ := strings.Cut(path, "?")
	u.Path, u.RawQuery = strings.TrimSuffix(u.Path, "/")+p, query
	req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", accept)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if a.agent != "" {
		req.Header.Set("User-Agent", a.agent)
	}
	res, err := a.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return res, nil
}

// decode reads an answer into into (nil: discarded), or its error.
func decode(res *http.Response, into any) error {
	defer res.Body.Close()
	if err := statusError(res); err != nil {
		return err
	}
	data, err := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	if err != nil {
		return err
	}
	if into != nil {
		return json.Unmarshal(data, into)
	}
	return nil
}

// statusError is a non-2xx answer as an ErrAPI error carrying the API
// server's own message (a metav1.Status) and the plugin's kind of its
// code; nil for a 2xx one.
func statusError(res *http.Response) error {
	if res.StatusCode/100 == 2 {
		return nil
	}
	data, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	var st metav1.Status
	msg := strings.TrimSpace(string(data))
	if json.Unmarshal(data, &st) == nil && st.Message != "" {
		msg = st.Message
	}
	return fmt.Errorf("%w (%w): HTTP %d: %s", ErrAPI, kindOfStatus(res.StatusCode), res.StatusCode, msg)
}

var _ NamespaceAPI = (*RESTAPI)(nil)

// objectMeta is what the plugin decodes of an object: its metadata alone
// (the API server is asked for PartialObjectMetadata, as client-go's
// metadata informers ask, and plain objects decode the same).
type objectMeta struct {
	Metadata struct {
		Name            string            `json:"name"`
		Labels          map[string]string `json:"labels"`
		ResourceVersion string            `json:"resourceVersion"`
	} `json:"metadata"`
}

func (o objectMeta) namespace() Namespace {
	return Namespace{Name: o.Metadata.Name, Labels: o.Metadata.Labels}
}

// metadataAccept asks for metadata only, or the object where the API server
// cannot (every supported one can: Kubernetes 1.15+).
const (
	metadataListAccept = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
	metadataAccept     = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
)

// ListNamespaces implements NamespaceAPI: pages of config.APIListPage, one
// consistent list.
func (a *RESTAPI) ListNamespaces(ctx context.Context) ([]Namespace, string, error) {
	var out []Namespace
	rv, err := a.listPages(ctx, "namespaces", "/api/v1/namespaces", metadataListAccept, func(raw json.RawMessage) error {
		var o objectMeta
		if err := json.Unmarshal(raw, &o); err != nil {
			return err
		}
		out = append(out, o.namespace())
		return nil
	})
	return out, rv, err
}

// WatchNamespaces implements NamespaceAPI: a watch with bookmarks, read as
// the API server streams it.
func (a *RESTAPI) WatchNamespaces(ctx context.Context, resourceVersion string, timeout time.Duration, each func(WatchEvent)) error {
	return a.watchStream(ctx, "namespaces", "/api/v1/namespaces", metadataAccept, resourceVersion, timeout, func(typ string, raw json.RawMessage) error {
		var obj objectMeta
		if err := json.Unmarshal(raw, &obj); err != nil {
			return err
		}
		each(WatchEvent{Type: typ, Namespace: obj.namespace(), ResourceVersion: obj.Metadata.ResourceVersion})
		return nil
	})
}

// listPages lists path in pages of config.APIListPage, one
// consistent list, handing each item to each; it returns the resource
// version the list is as of. what names the objects in errors.
func (a *RESTAPI) listPages(ctx context.Context, what, path, accept string, each func(json.RawMessage) error) (string, error) {
	cont := ""
	for {
		q := url.Values{"limit": {fmt.Sprint(config.APIListPage)}}
		if cont != "" {
			q.Set("continue", cont)
		}
		var page struct {
			Metadata struct {
				ResourceVersion string `json:"resourceVersion"`
				Continue        string `json:"continue"`
			} `json:"metadata"`
			Items []json.RawMessage `json:"items"`
		}
		if err := a.doAccept(ctx, http.MethodGet, path+"?"+q.Encode(), accept, &page); err != nil {
			return "", fmt.Errorf("listing %s: %w", what, err)
		}
		for _, it := range page.Items {
			if err := each(it); err != nil {
				return "", fmt.Errorf("listing %s: %w", what, err)
			}
		}
		if cont = page.Metadata.Continue; cont == "" {
			return page.Metadata.ResourceVersion, nil
		}
	}
}

// watchStream watches path from resourceVersion, with bookmarks, handing
// each event's type and object to each as the API server streams them,
// until the API server ends the watch (nil), ctx ends, or it fails.
func (a *RESTAPI) watchStream(ctx context.Context, what, path, accept, resourceVersion string, timeout time.Duration,
	each func(typ string, obj json.RawMessage) error) error {
	q := url.Values{"watch": {"true"}, "allowWatchBookmarks": {"true"}, "resourceVersion": {resourceVersion},
		"timeoutSeconds": {fmt.Sprint(int(max(timeout, time.Second) / time.Second))}}
	res, err := a.send(ctx, http.MethodGet, path+"?"+q.Encode(), accept, "", nil)
	if err != nil {
		return fmt.Errorf("watching %s: %w", what, err)
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusGone {
		return fmt.Errorf("watching %s: %w", what, errWatch(res.StatusCode, "resource version "+resourceVersion))
	}
	if err := statusError(res); err != nil {
		return fmt.Errorf("watching %s: %w", what, err)
	}
	dec := json.NewDecoder(res.Body)
	for {
		var ev struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) || ctx.Err() != nil {
				return ctx.Err() // the API server ended it (nil), or we did
			}
			return fmt.Errorf("watching %s: %w: %w", what, ErrUnavailable, err)
		}
		if ev.Type == "ERROR" {
			var st metav1.Status
			_ = json.Unmarshal(ev.Object, &st)
			return errWatch(int(st.Code), st.Message)
		}
		if err := each(ev.Type, ev.Object); err != nil {
			return fmt.Errorf("watching %s: a %s event: %w", what, ev.Type, err)
		}
	}
}

var _ NetworkPolicyAPI = (*RESTAPI)(nil)

const networkPolicies = "/apis/networking.k8s.io/v1/networkpolicies"

// ListNetworkPolicies implements NetworkPolicyAPI: every namespace's, in
// pages, one consistent list.
func (a *RESTAPI) ListNetworkPolicies(ctx context.Context) ([]*networkingv1.NetworkPolicy, string, error) {
	var out []*networkingv1.NetworkPolicy
	rv, err := a.listPages(ctx, "network policies", networkPolicies, "application/json", func(raw json.RawMessage) error {
		np := &networkingv1.NetworkPolicy{}
		if err := json.Unmarshal(raw, np); err != nil {
			return err
		}
		np.ManagedFields = nil // what the plugin keeps is compiled; nothing of this is read again
		out = append(out, np)
		return nil
	})
	return out, rv, err
}

// WatchNetworkPolicies implements NetworkPolicyAPI.
func (a *RESTAPI) WatchNetworkPolicies(ctx context.Context, resourceVersion string, timeout time.Duration, each func(PolicyEvent)) error {
	return a.watchStream(ctx, "network policies", networkPolicies, "application/json", resourceVersion, timeout, func(typ string, raw json.RawMessage) error {
		np := &networkingv1.NetworkPolicy{}
		if err := json.Unmarshal(raw, np); err != nil {
			return err
		}
		each(PolicyEvent{Type: typ, Policy: np, ResourceVersion: np.ResourceVersion})
		return nil
	})
}

// ServedKinds implements NetworkPolicyAPI by discovery: the API groups the
// API server serves (/apis), then the resources of each version of those
// groups kinds name. Discovery is open to every authenticated account
// (system:discovery): the token needs nothing more.
func (a *RESTAPI) ServedKinds(ctx context.Context, kinds []string) ([]string, error) {
	var groups metav1.APIGroupList
	if err := a.do(ctx, http.MethodGet, "/apis", "", nil, &groups); err != nil {
		return nil, fmt.Errorf("discovering the API groups: %w", err)
	}
	var served []string
	for _, g := range groups.Groups {
		for _, v := range g.Versions {
			if !slices.ContainsFunc(kinds, func(k string) bool { return strings.HasPrefix(k, g.Name+"/") }) {
				continue
			}
			var rs metav1.APIResourceList
			if err := a.do(ctx, http.MethodGet, "/apis/"+v.GroupVersion, "", nil, &rs); err != nil {
				return nil, fmt.Errorf("discovering the resources of %s: %w", v.GroupVersion, err)
			}
			for _, r := range rs.APIResources {
				if k := g.Name + "/" + r.Name; slices.Contains(kinds, k) && !slices.Contains(served, k) {
					served = append(served, k)
				}
			}
		}
	}
	slices.Sort(served)
	return served, nil
}
