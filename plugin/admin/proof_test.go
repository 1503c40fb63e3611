package admin

import (
	"cmp"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/testfs"
)

// Issue 46: an answer on admin.listen proves it is the plugin's with the
// key of its start, which only the node's administrators may read: the
// plugin's answer verifies, another program's (no proof, or one made with
// another key) does not, and a key others may have written is not trusted.
func TestAnAnswerProvesItIsThePlugins(t *testing.T) {
	dir := testfs.TempDir(t)
	keyFile := filepath.Join(dir, "admin", "admin.key")
	key, err := NewKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ReadKey(keyFile); err != nil || string(got) != string(key) {
		t.Fatalf("ReadKey = %x, %v; want the key written", got, err)
	}
	if again, err := NewKey(keyFile); err != nil || string(again) == string(key) {
		t.Fatalf("a new start's key: %v; want a new one", err)
	}
	key, _ = ReadKey(keyFile)
	a := &Admin{Key: key, Log: logrus.NewEntry(logrus.New())}
	l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = a.Serve(ctx, l) }()
	ask := func(addr string) (*http.Response, string) {
		nonce := NewNonce()
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/livez", nil)
		req.Header.Set(NonceHeader, nonce)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { res.Body.Close() })
		return res, nonce
	}
	res, nonce := ask(l.Addr().String())
	if err := Verify(key, nonce, res); err != nil {
		t.Fatalf("the plugin's answer: %v", err)
	}
	other := make([]byte, keyBytes)
	if err := Verify(other, nonce, res); !errors.Is(err, ErrNotThePlugin) {
		t.Fatalf("verified with another key: %v, want ErrNotThePlugin", err)
	}
	res.Header.Del(ProofHeader)
	if err := Verify(key, nonce, res); !errors.Is(err, ErrNotThePlugin) {
		t.Fatalf("an answer without proof: %v, want ErrNotThePlugin", err)
	}
	// issue 54: a proof replayed for another nonce (an answer recorded
	// before) does not verify
	replayed, _ := ask(l.Addr().String())
	if err := Verify(key, NewNonce(), replayed); !errors.Is(err, ErrNotThePlugin) {
		t.Errorf("an answer proved for another nonce: %v, want ErrNotThePlugin", err)
	}
	// issue 54: a relay at an address the client dials forwards the
	// nonce to the plugin and puts the plugin's proof on a status and
	// body of its own (health ok for a plugin answering 503, or the
	// reverse), or asks the plugin another path: none verifies
	for _, relay := range []struct {
		name   string
		path   string
		status int
		body   string
	}{{"its own status", "/livez", http.StatusServiceUnavailable, ""}, {"its own body", "/livez", 0, `{"status":"failing"}`},
		{"another path asked", "/healthz", 0, ""}} {
		r := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			up, _ := http.NewRequest(http.MethodGet, "http://"+l.Addr().String()+relay.path, nil)
			up.Header.Set(NonceHeader, req.Header.Get(NonceHeader))
			res, err := http.DefaultClient.Do(up)
			if err != nil {
				w.WriteHeader(http.StatusBadGateway)
				return
			}
			body, _ := io.ReadAll(res.Body)
			res.Body.Close()
			w.Header().Set(ProofHeader, res.Header.Get(ProofHeader))
			w.WriteHeader(cmp.Or(relay.status, res.StatusCode))
			_, _ = io.WriteString(w, cmp.Or(relay.body, string(body)))
		}))
		res, nonce := ask(strings.TrimPrefix(r.URL, "http://"))
		if err := Verify(key, nonce, res); !errors.Is(err, ErrNotThePlugin) {
			t.Errorf("a relay answering %s with the plugin's proof: %v, want ErrNotThePlugin", relay.name, err)
		}
		r.Close()
	}
	if _, err := ReadKey(filepath.Join(dir, "nowhere.key")); !errors.Is(err, ErrCannotTell) {
		t.Fatalf("a key that is not there: %v, want ErrCannotTell", err)
	}
	if runtime.GOOS != "windows" && os.Getuid() == 0 {
		if err := os.Chmod(keyFile, 0o666); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadKey(keyFile); !errors.Is(err, ErrCannotTell) {
			t.Fatalf("a key every user may write: %v, want ErrCannotTell (not trusted)", err)
		}
	}
}

// Issue 53: on Windows the private channel's pipe is trusted by its
// owner, read from the connected handle: SYSTEM or Administrators, which
// only SYSTEM and elevated administrators may set. A user's, the built-in
// Administrator account's (an unelevated token sets its user as owner) and
// a service account's are not the plugin's. The pipe asks for
// Administrators as its owner.
func TestWhoMayOwnThePrivateChannel(t *testing.T) {
	for _, tc := range []struct {
		sid  string
		want bool
	}{{"S-1-5-18", true}, {"S-1-5-32-544", true}, {"S-1-5-21-1-2-3-500", false}, {"S-1-5-21-1-2-3-1001", false}, {"S-1-5-19", false}, {"S-1-5-32-545", false}} {
		if got := PipeOwnerTrusted(tc.sid); got != tc.want {
			t.Errorf("PipeOwnerTrusted(%s) = %v, want %v", tc.sid, got, tc.want)
		}
	}
	if !strings.HasPrefix(PrivatePipeSDDL, "O:BA") {
		t.Errorf("the pipe's security descriptor %s does not make Administrators its owner", PrivatePipeSDDL)
	}
}

// Issue 53: the admin key is the node administrators' to read, whatever
// was at its path before: a temporary file planted readable (and another
// user's) before the start is replaced by one of mode 0600, and a key
// others may read is not trusted (who reads it may answer for the
// plugin). Windows' reading of the same rule is nodefs'
// TestCheckSecretRefusesWhoElseMayRead (wine keeps no ACLs).
func TestTheAdminKeyIsReadByTheAdministratorsAlone(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("file modes are Linux's; Windows' DACLs are judged on SDDL (plugin/nodefs)")
	}
	dir := testfs.TempDir(t)
	keyFile := filepath.Join(dir, "admin", "admin.key")
	if err := os.MkdirAll(filepath.Dir(keyFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile+".new", []byte("planted"), 0o644); err != nil {
		t.Fatal(err)
	}
	if os.Getuid() == 0 {
		if err := os.Chown(keyFile+".new", 1001, 1001); err != nil {
			t.Fatal(err)
		}
	}
	key, err := NewKey(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(keyFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the key over a planted temporary file: %v, %v; want mode 0600", fi.Mode(), err)
	}
	if got, err := ReadKey(keyFile); err != nil || string(got) != string(key) {
		t.Fatalf("ReadKey = %x, %v; want the key written", got, err)
	}
	if err := os.Chmod(keyFile, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadKey(keyFile); !errors.Is(err, ErrCannotTell) || !strings.Contains(err.Error(), "may be read by others") {
		t.Fatalf("a key every user may read: %v, want ErrCannotTell naming who may read it", err)
	}
}
