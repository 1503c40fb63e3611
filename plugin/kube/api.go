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
	"strings"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin"
)

// API is what the reporter asks of the API server: the process boundary,
// and the seam of the unit tests.
type API interface {
	GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error)
	CreateEvent(ctx context.Context, ev *eventsv1.Event) error
	// PatchPodStatus applies a strategic merge patch to pods/status.
	PatchPodStatus(ctx context.Context, namespace, name string, patch []byte) error
}

// ErrAPI: the API server answered a request with an error status. Each
// such error also wraps the plugin's kind of it (plugin.ErrAPIGone,
// ErrAPIRefused, ErrAPIUnavailable), which the table of errors judges.
var ErrAPI = errors.New("API server refused the request")

// kindOfStatus is the plugin's kind of an HTTP status from the API server:
// gone (404, 410), denied (401, 403: RBAC or the token, a few tries: an API
// server just restarted may deny before its authorizer has synced),
// unavailable (408, 409, 429, 5xx: retried), refused for good (any other
// 4xx: a bad object, admission).
func kindOfStatus(code int) error {
	switch code {
	case http.StatusNotFound, http.StatusGone:
		return plugin.ErrAPIGone
	case http.StatusUnauthorized, http.StatusForbidden:
		return plugin.ErrAPIDenied
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooManyRequests:
		return plugin.ErrAPIUnavailable
	}
	if code >= 500 {
		return plugin.ErrAPIUnavailable
	}
	return plugin.ErrAPIRefused
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

// GetPod implements API.
func (a *RESTAPI) GetPod(ctx context.Context, namespace, name string) (*corev1.Pod, error) {
	var pod corev1.Pod
	err := a.do(ctx, http.MethodGet, "/api/v1/namespaces/"+url.PathEscape(namespace)+"/pods/"+url.PathEscape(name), "", nil, &pod)
	if err != nil {
		return nil, fmt.Errorf("reading pod %s/%s: %w", namespace, name, err)
	}
	return &pod, nil
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
	u := *a.base
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if a.agent != "" {
		req.Header.Set("User-Agent", a.agent)
	}
	res, err := a.client.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %w", plugin.ErrAPIUnavailable, err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	if err != nil {
		return err
	}
	if res.StatusCode/100 != 2 {
		var st metav1.Status
		msg := strings.TrimSpace(string(data))
		if json.Unmarshal(data, &st) == nil && st.Message != "" {
			msg = st.Message
		}
		return fmt.Errorf("%w (%w): HTTP %d: %s", ErrAPI, kindOfStatus(res.StatusCode), res.StatusCode, msg)
	}
	if into != nil {
		return json.Unmarshal(data, into)
	}
	return nil
}
