// A real Kubernetes API server for the e2e tests: etcd and kube-apiserver
// built from source (make kube), RBAC on, a static admin token, and a
// service-account signing key so a ServiceAccount's token can be minted.

package harness

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Kube is a running API server.
type Kube struct {
	Etcd, APIServer *Process
	URL             string
	Admin           *kubernetes.Clientset
	dir             string
	ports           [3]string
}

const adminToken = "hcnpm-admin-token"

// findKubeBin locates a binary make kube builds (see Tool).
func findKubeBin(env, name string) (string, error) {
	return Tool(env, name, "run make kube")
}

// StartKube starts etcd and kube-apiserver in e.Dir and waits for /readyz;
// e.Close stops them.
func (e *Env) StartKube(ctx context.Context) (*Kube, error) {
	k, err := StartKube(ctx, filepath.Join(e.Dir, "kube"))
	if k != nil {
		e.kube = k
	}
	return k, err
}

// StartKube starts etcd and kube-apiserver with their files in dir and
// waits for /readyz; the caller stops them (Stop).
func StartKube(ctx context.Context, dir string) (*Kube, error) {
	apiBin, err := findKubeBin("KUBE_APISERVER_BIN", "kube-apiserver-v1.37.2")
	if err != nil {
		return nil, err
	}
	etcdBin, err := findKubeBin("ETCD_BIN", "etcd-v3.6.16")
	if err != nil {
		return nil, err
	}
	k := &Kube{dir: dir}
	if err := os.MkdirAll(k.dir, 0o700); err != nil {
		return nil, err
	}
	for i := range k.ports {
		addr, err := freeLoopbackAddr()
		if err != nil {
			return nil, err
		}
		k.ports[i] = addr
	}
	if err := k.writeSecrets(); err != nil {
		return nil, err
	}
	if err := k.start(ctx, etcdBin, apiBin); err != nil {
		return k, err
	}
	return k, nil
}

// AdminKubeconfig writes a kubeconfig with the admin token (system:masters)
// and returns its path: for helm, as an operator's cluster-admin.
func (k *Kube) AdminKubeconfig() (string, error) {
	return k.writeKubeconfig("admin", adminToken)
}

func (k *Kube) writeSecrets() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"sa.key":     pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
		"sa.pub":     pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
		"tokens.csv": []byte(adminToken + ",admin,admin,system:masters\n"),
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(k.dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func (k *Kube) start(ctx context.Context, etcdBin, apiBin string) error {
	etcdURL := "http://" + k.ports[0]
	var err error
	k.Etcd, err = start("etcd", filepath.Join(k.dir, "etcd.log"), etcdBin, "--data-dir", filepath.Join(k.dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL, "--listen-peer-urls", "http://"+k.ports[1],
		"--initial-advertise-peer-urls", "http://"+k.ports[1], "--initial-cluster", "default=http://"+k.ports[1])
	if err != nil {
		return err
	}
	port := k.ports[2][strings.LastIndexByte(k.ports[2], ':')+1:]
	k.APIServer, err = start("kube-apiserver", filepath.Join(k.dir, "apiserver.log"), apiBin,
		"--etcd-servers", etcdURL, "--bind-address", "127.0.0.1", "--secure-port", port,
		"--cert-dir", filepath.Join(k.dir, "certs"), "--token-auth-file", filepath.Join(k.dir, "tokens.csv"),
		"--service-account-key-file", filepath.Join(k.dir, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(k.dir, "sa.key"),
		"--service-account-issuer", "https://kubernetes.default.svc", "--api-audiences", "https://kubernetes.default.svc",
		"--authorization-mode", "RBAC", "--service-cluster-ip-range", "10.96.0.0/16",
		// as kubeadm and the managed clusters run it: HostProcess pods (the
		// chart's) are privileged
		"--allow-privileged=true",
		// no controller-manager runs: nobody would create the default
		// service accounts the admission plugin wants for pods
		"--disable-admission-plugins", "ServiceAccount")
	if err != nil {
		return err
	}
	k.URL = "https://" + k.ports[2]
	k.Admin, err = kubernetes.NewForConfig(k.config(adminToken))
	if err != nil {
		return err
	}
	err = waitFor(ctx, 90*time.Second, func() error {
		if !k.APIServer.Running() {
			return errors.New("kube-apiserver exited")
		}
		body, err := k.Admin.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil || string(body) != "ok" {
			return fmt.Errorf("/readyz: %s %v", body, err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("kube-apiserver did not become ready: %w\n%s\n%s", err, k.APIServer.Tail(20), k.Etcd.Tail(10))
	}
	return nil
}

func (k *Kube) config(token string) *rest.Config {
	return &rest.Config{Host: k.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS: 100, Burst: 200}
}

// StopAPIServer stops the API server (etcd keeps the data).
func (k *Kube) StopAPIServer() { k.APIServer.Stop() }

// RestartAPIServer starts etcd and the API server again on the same ports
// and data (after StopAPIServer).
func (k *Kube) RestartAPIServer(ctx context.Context) error {
	etcdBin, _ := findKubeBin("ETCD_BIN", "etcd-v3.6.16")
	apiBin, _ := findKubeBin("KUBE_APISERVER_BIN", "kube-apiserver-v1.37.2")
	k.Etcd.Stop()
	return k.start(ctx, etcdBin, apiBin)
}

// Stop stops both.
func (k *Kube) Stop() {
	if k.APIServer != nil {
		k.APIServer.Stop()
	}
	if k.Etcd != nil {
		k.Etcd.Stop()
	}
}

// ServiceAccountKubeconfig mints a token for the ServiceAccount
// namespace/name (TokenRequest) and writes a kubeconfig with it: the plugin
// then has exactly that ServiceAccount's RBAC.
func (k *Kube) ServiceAccountKubeconfig(ctx context.Context, namespace, name string) (string, error) {
	token, err := k.Token(ctx, namespace, name)
	if err != nil {
		return "", err
	}
	return k.writeKubeconfig(name, token)
}

// CAFile is the certificate the API server serves, self-signed with its
// CA (kube-apiserver --cert-dir): what a kubeconfig's
// certificate-authority names to verify it.
func (k *Kube) CAFile() string { return filepath.Join(k.dir, "certs", "apiserver.crt") }

// RESTConfig is the API server's address with token.
func (k *Kube) RESTConfig(token string) *rest.Config { return k.config(token) }

// Client is a clientset that authenticates with token.
func (k *Kube) Client(token string) (*kubernetes.Clientset, error) {
	return kubernetes.NewForConfig(k.config(token))
}

// PodToken mints a token of the ServiceAccount namespace/sa bound to pod
// (which runs as sa), as kubelet gets one for the pod's projected volume:
// the API server names the pod's node in it
// (authentication.kubernetes.io/node-name, Kubernetes 1.30+).
func (k *Kube) PodToken(ctx context.Context, namespace, sa string, pod *corev1.Pod) (string, error) {
	exp := int64(3600)
	tr, err := k.Admin.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{
		ExpirationSeconds: &exp,
		BoundObjectRef:    &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for %s/%s bound to pod %s: %w", namespace, sa, pod.Name, err)
	}
	return tr.Status.Token, nil
}

// NodeToken mints a token of the ServiceAccount namespace/sa bound to the
// Node object node, as the Windows service's kubeconfig gets one
// (kubectl create token --bound-object-kind Node): the API server names the
// node in it (authentication.kubernetes.io/node-name).
func (k *Kube) NodeToken(ctx context.Context, namespace, sa string, node *corev1.Node) (string, error) {
	exp := int64(3600)
	tr, err := k.Admin.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa, &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{
		ExpirationSeconds: &exp,
		BoundObjectRef:    &authv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for %s/%s bound to node %s: %w", namespace, sa, node.Name, err)
	}
	return tr.Status.Token, nil
}

// Token mints a token of the ServiceAccount namespace/sa bound to nothing.
func (k *Kube) Token(ctx context.Context, namespace, sa string) (string, error) {
	exp := int64(3600)
	tr, err := k.Admin.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, sa,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for %s/%s: %w", namespace, sa, err)
	}
	return tr.Status.Token, nil
}

func (k *Kube) writeKubeconfig(name, token string) (string, error) {
	path := filepath.Join(k.dir, name+".kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster:
    server: %s
    insecure-skip-tls-verify: true
users:
- name: %s
  user:
    token: %s
contexts:
- name: test
  context:
    cluster: test
    user: %s
current-context: test
`, k.URL, name, token, name)
	return path, os.WriteFile(path, []byte(cfg), 0o600)
}

// CreatePod creates a pod object on node for p (namespace, name, UID are
// the API server's; p.UID is set to it), with the readiness gate on the
// plugin's condition when gate is set.
func (k *Kube) CreatePod(ctx context.Context, p *Pod, node string, gate bool) (*corev1.Pod, error) {
	if _, err := k.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.Namespace}},
		metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		return nil, err
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Annotations: p.Annotations, Labels: p.Labels},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "example/app:1"}}},
	}
	if gate {
		pod.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: "hcn.nri.io/port-mappings-ready"}}
	}
	created, err := k.Admin.CoreV1().Pods(p.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	p.UID = string(created.UID)
	return created, nil
}

// Healthy reports whether the API server answers.
func (k *Kube) Healthy(ctx context.Context) bool {
	_, err := k.Admin.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
	return err == nil
}
