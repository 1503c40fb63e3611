package admin

import (
	"context"
	"io"
	"net"
	"net/http"
	"testing"

	"golang.org/x/sys/windows"
)

// On a Windows host: the private pipe serves reload to an administrator
// (the workflow's runner account is one). Wine's named pipes do not work
// for go-winio, so under wine this is left to the Windows workflow; the
// pipe's DACL is judged on its SDDL everywhere
// (TestThePrivatePipeIsTheAdministratorsAlone).
func TestThePrivatePipeServesReload(t *testing.T) {
	if windows.NewLazySystemDLL("ntdll.dll").NewProc("wine_get_version").Find() == nil {
		t.Skip("wine's named pipes do not work for go-winio: run on a Windows host (the Windows workflow)")
	}
	reloads := 0
	a := newAdmin(&reloads)
	l, err := ListenPrivate(`\\.\pipe\nri-hcn-portmap-test`)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = a.ServePrivate(ctx, l) }()
	client := &http.Client{Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
		return DialPrivate(`\\.\pipe\nri-hcn-portmap-test`)
	}}}
	res, err := client.Post("http://plugin/reload", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || reloads != 1 {
		t.Fatalf("reload on the pipe: %s, %d reloads", res.Status, reloads)
	}
}
