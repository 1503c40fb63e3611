//go:build !windows

package main

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A plugin hangs up on a reload from a peer it does not take (not the node's
// administrators). However the transport reports the closed connection
// (EOF, a reset, or an idle connection closed before the request was
// written, which depends on who is first), reload says the channel is the
// administrators', every time; a socket nobody serves is told as such.
func TestReloadHungUpOnSaysTheChannelIsTheAdministrators(t *testing.T) {
	for _, tc := range []struct {
		name   string
		hangUp func(net.Conn)
	}{
		{"at once", func(c net.Conn) { c.Close() }},
		{"after reading the request", func(c net.Conn) {
			_, _ = http.ReadRequest(bufio.NewReader(c))
			c.Close()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(t.TempDir(), "admin.sock")
			l, err := net.Listen("unix", sock)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					tc.hangUp(c)
				}
			}()
			for i := 0; i < 500; i++ {
				var out bytes.Buffer
				err := adminCmd("reload", []string{"--config", "", "--admin-socket", sock}, &out, &out)
				if err == nil || !strings.Contains(err.Error(), "admin.socket is for the node's administrators") {
					t.Fatalf("try %d: %v, want the channel said to be the administrators'", i, err)
				}
			}
		})
	}
	sock := filepath.Join(t.TempDir(), "nobody.sock")
	err := adminCmd("reload", []string{"--config", "", "--admin-socket", sock}, new(bytes.Buffer), new(bytes.Buffer))
	if err == nil || strings.Contains(err.Error(), "administrators") || !strings.Contains(err.Error(), "no plugin answers at "+sock) {
		t.Fatalf("no socket: %v, want no plugin answers, nothing about administrators", err)
	}
}

// Issue 39: a configuration file that does not load still says where the
// plugin answers: reload asks at the admin.socket the file writes (read
// line by line), not at the default; where nothing answers, the error
// names that address and says the file does not load, and why.
func TestReloadAsksWhereABrokenFileSaysThePluginAnswers(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "admin.sock")
	cfg := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfg, []byte("[admin]\nsocket = '"+sock+"'\n\n[hcn]\nnetwork = nat\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err := adminCmd("reload", []string{"--config", cfg}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "no plugin answers at "+sock) || !strings.Contains(err.Error(), "does not load") ||
		!strings.Contains(err.Error(), "hcn.network") {
		t.Fatalf("nothing at the file's socket: %v; want it named, and the file's error", err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"result":"rejected","error":"config: hcn.network: a string needs quotes"}`))
	})}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	err = adminCmd("reload", []string{"--config", cfg}, &out, &out)
	if err != nil && !strings.Contains(err.Error(), "a string needs quotes") {
		t.Fatalf("reload with the plugin at the file's socket: %v; want the plugin's own answer", err)
	}
}
