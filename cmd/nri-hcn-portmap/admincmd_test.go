//go:build !windows

package main

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
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
