package admin

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/nodefs"
)

// How an answer on admin.listen proves it comes from the plugin. Anyone on
// the node may bind a loopback port first (at boot, or while the plugin
// restarts), so an answer there says nothing by itself. The plugin makes a
// new random key at each start and writes it where only the node's
// administrators may read or change it (admin.key_file, in a folder of
// theirs alone); a client sends a fresh nonce and the plugin answers with
// an HMAC of it under the key. A client that cannot read the key cannot
// tell, and says so; one whose answer carries no proof, or a wrong one, is
// told that something else answers. The metrics listener proves nothing:
// Prometheus reads it, and it serves nothing a client acts on.
const (
	// NonceHeader carries the client's nonce (hex, at most 64 bytes).
	NonceHeader = "X-Nri-Hcn-Portmap-Nonce"
	// ProofHeader carries the plugin's answer: hex HMAC-SHA256.
	ProofHeader = "X-Nri-Hcn-Portmap-Proof"
	keyBytes    = 32
	maxNonce    = 64
)

var (
	// ErrNotThePlugin: something answers at the admin address, but not
	// the plugin (no proof, or a wrong one).
	ErrNotThePlugin = errors.New("the answer is not nri-hcn-portmap's")
	// ErrCannotTell: the client cannot read the admin key, so cannot tell
	// whether the plugin answers.
	ErrCannotTell = errors.New("cannot tell whether nri-hcn-portmap answers")
)

// PipeOwnerTrusted is who may own the private channel's pipe on Windows:
// SYSTEM or Administrators, which only a process running as SYSTEM or as
// an elevated administrator may make a pipe's owner. The owner is read
// from the connected handle: unlike the server's process ID, which a
// process started later may be given, it is the pipe's own.
func PipeOwnerTrusted(sid string) bool { return sid == "S-1-5-18" || sid == "S-1-5-32-544" }

// NewKey makes the plugin's key for this start and writes it to path, in a
// folder made for the node's administrators alone (checked): written to a
// temporary file, then renamed over the last one.
func NewKey(path string) ([]byte, error) {
	dir := filepath.Dir(path)
	if err := nodefs.MkdirPrivate(dir); err != nil {
		return nil, fmt.Errorf("admin.key_file %s: %w", path, err)
	}
	if err := nodefs.CheckFolder(dir); err != nil {
		return nil, fmt.Errorf("admin.key_file: %w", err)
	}
	key := make([]byte, keyBytes)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	// a new file, for the administrators alone, whatever was there:
	// one another principal may read would hand them the key
	tmp := path + ".new"
	if err := nodefs.WriteSecret(tmp, []byte(hex.EncodeToString(key))); err != nil {
		return nil, fmt.Errorf("admin.key_file %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, fmt.Errorf("admin.key_file %s: %w", path, err)
	}
	return key, nil
}

// ReadKey reads the running plugin's key, refusing one that others than
// the node's administrators may have written (ErrCannotTell when it
// cannot be read).
func ReadKey(path string) ([]byte, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: admin.key_file is empty", ErrCannotTell)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		why := ""
		if errors.Is(err, os.ErrPermission) {
			why = " (it is the node's administrators': run this as root, or from an elevated prompt)"
		}
		return nil, fmt.Errorf("%w: the admin key %s cannot be read%s: %w", ErrCannotTell, path, why, err)
	}
	if err := nodefs.CheckSecret(path); err != nil { // who else may read it may answer for the plugin
		return nil, fmt.Errorf("%w: the admin key: %w", ErrCannotTell, err)
	}
	key, err := hex.DecodeString(string(data))
	if err != nil || len(key) != keyBytes {
		return nil, fmt.Errorf("%w: the admin key %s is not one the plugin writes", ErrCannotTell, path)
	}
	return key, nil
}

// Prove is the proof, under key, of one answer: the request's nonce,
// method and path, and the answer's status and body. A proof of the nonce
// alone would let a relay at an address a client dials forward the nonce
// to the plugin and put the proof on a status and body of its own.
func Prove(key []byte, nonce, method, path string, status int, body []byte) string {
	sum := sha256.Sum256(body)
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "nri-hcn-portmap admin v2\n%s\n%s %s\n%d\n%x", nonce, method, path, status, sum)
	return hex.EncodeToString(m.Sum(nil))
}

// NewNonce is a fresh nonce.
func NewNonce() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// maxProvedBody bounds the answer a client reads to check its proof.
const maxProvedBody = 16 << 20

// Verify checks res, the answer to a request that carried nonce, against
// key: nil when it proves the plugin answered that request with that
// status and body, else ErrNotThePlugin. It reads the body, and leaves it
// in res for the caller.
func Verify(key []byte, nonce string, res *http.Response) error {
	got := res.Header.Get(ProofHeader)
	if got == "" {
		return fmt.Errorf("%w: it carries no proof", ErrNotThePlugin)
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, maxProvedBody+1))
	res.Body.Close()
	if err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	if len(body) > maxProvedBody {
		return fmt.Errorf("%w: an answer over %d bytes", ErrNotThePlugin, maxProvedBody)
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	want := Prove(key, nonce, res.Request.Method, res.Request.URL.RequestURI(), res.StatusCode, body)
	if !hmac.Equal([]byte(got), []byte(want)) {
		return fmt.Errorf("%w: its proof is not the admin key's for this request, status and body", ErrNotThePlugin)
	}
	return nil
}

// proving answers each request that carries a nonce with the proof of its
// answer (Prove): the answer is kept until it is whole, then sent with
// the proof in its header.
func proving(key []byte, next http.Handler) http.Handler {
	if key == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := r.Header.Get(NonceHeader)
		if n == "" || len(n) > maxNonce {
			next.ServeHTTP(w, r)
			return
		}
		rec := &recorder{header: http.Header{}, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.Header().Set(ProofHeader, Prove(key, n, r.Method, r.URL.RequestURI(), rec.status, rec.body.Bytes()))
		w.WriteHeader(rec.status)
		_, _ = w.Write(rec.body.Bytes())
	})
}

// recorder keeps an answer until it is whole.
type recorder struct {
	header      http.Header
	status      int
	wroteHeader bool
	body        bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if !r.wroteHeader {
		r.status, r.wroteHeader = status, true
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.wroteHeader = true
	return r.body.Write(b)
}
