package main

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admin"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/test/testfs"
)

// Issue 54: a command takes an answer on admin.listen only when it can
// verify it: with the plugin's key it does; without a key to read (not
// an administrator, or the key gone) it says it cannot tell, never that
// the plugin answered; with another start's key it says another program
// answers.
func TestACommandTrustsOnlyAnAnswerItVerified(t *testing.T) {
	dir := testfs.TempDir(t)
	keyFile := filepath.Join(dir, "admin", "admin.key")
	key, err := admin.NewKey(keyFile)
	must(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := logrus.NewEntry(logrus.New())
	a := &admin.Admin{Key: key, Log: log}
	go func() { _ = a.Serve(ctx, l) }()
	get := func(keyFile string) error {
		res, err := newAdminClient(config.Admin{Listen: l.Addr().String(), KeyFile: keyFile}).get(ctx, "/livez")
		if err == nil {
			res.Body.Close()
		}
		return err
	}
	if err := get(keyFile); err != nil {
		t.Fatalf("the plugin's answer with its key: %v", err)
	}
	if err := get(filepath.Join(dir, "nowhere", "admin.key")); !errors.Is(err, admin.ErrCannotTell) {
		t.Errorf("without a key to read: %v, want ErrCannotTell", err)
	}
	other := filepath.Join(dir, "other", "admin.key")
	_, err = admin.NewKey(other)
	must(t, err)
	if err := get(other); !errors.Is(err, admin.ErrNotThePlugin) {
		t.Errorf("with another start's key: %v, want ErrNotThePlugin", err)
	}
}
