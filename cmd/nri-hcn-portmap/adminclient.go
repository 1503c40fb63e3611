package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nri-hcn-portmap/nri-hcn-portmap/config"
	"github.com/nri-hcn-portmap/nri-hcn-portmap/plugin/admin"
)

// errNotAnswering: nothing answers at the admin address (the plugin does
// not run there).
var errNotAnswering = errors.New("no plugin answers")

// adminClient is how every command asks the running plugin (health,
// reload, status, cleanup, doctor): one timeout, and one rule for whose
// answer it takes. On admin.listen the answer must carry the proof made
// with the plugin's key (plugin/admin proof.go): without one, something
// else answers there (admin.ErrNotThePlugin); a client that cannot read
// the key cannot tell, and says so (admin.ErrCannotTell). On admin.socket
// (reload's private channel) the channel's server is checked instead
// (admin.DialPrivate: its process's account).
type adminClient struct {
	cfg     config.Admin
	timeout time.Duration
}

func newAdminClient(a config.Admin) adminClient {
	return adminClient{cfg: a, timeout: config.AdminClientTimeout}
}

// get asks GET path at admin.listen and returns the plugin's answer,
// proved; errNotAnswering when nothing listens there.
func (c adminClient) get(ctx context.Context, path string) (*http.Response, error) {
	if c.cfg.Listen == "" {
		return nil, fmt.Errorf("admin.listen is empty: %w", errNotAnswering)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.cfg.Listen+path, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	nonce := admin.NewNonce()
	req.Header.Set(admin.NonceHeader, nonce)
	// the body as the plugin proved it: no compression the transport
	// would undo before Verify reads it
	req.Header.Set("Accept-Encoding", "identity")
	res, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		cancel()
		if op := (*net.OpError)(nil); errors.As(err, &op) && op.Op == "dial" { // refused: nothing listens there
			return nil, fmt.Errorf("%w at %s: %w", errNotAnswering, c.cfg.Listen, err)
		}
		return nil, fmt.Errorf("%s: %w", c.cfg.Listen, err)
	}
	res.Body = cancelOnClose{res.Body, cancel}
	key, err := admin.ReadKey(c.cfg.KeyFile)
	if err == nil {
		err = admin.Verify(key, nonce, res)
	}
	if err != nil {
		res.Body.Close()
		if errors.Is(err, admin.ErrNotThePlugin) {
			return nil, fmt.Errorf("something answers at %s (admin.listen), but %w: another program holds the plugin's address", c.cfg.Listen, err)
		}
		return nil, fmt.Errorf("%s (admin.listen): %w", c.cfg.Listen, err)
	}
	return res, nil
}

// postPrivate asks POST path on admin.socket, the node's administrators'
// channel.
func (c adminClient) postPrivate(ctx context.Context, path string) (*http.Response, error) {
	if c.cfg.Socket == "" {
		return nil, fmt.Errorf("admin.socket is empty: the plugin serves no reload: %w", errNotAnswering)
	}
	// reached: the private channel was opened, so a request that fails
	// after it was hung up on by the plugin (a peer it does not take), in
	// whichever way the transport reports the closed connection (EOF, a
	// reset, a broken pipe, or an idle connection closed before the
	// request was written).
	var reached atomic.Bool
	client := &http.Client{Timeout: c.timeout, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			conn, err := admin.DialPrivate(c.cfg.Socket)
			if err == nil {
				reached.Store(true)
			}
			return conn, err
		}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://plugin"+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := client.Do(req)
	if err != nil {
		var timeout net.Error
		hungUp := reached.Load() && !(errors.As(err, &timeout) && timeout.Timeout())
		if hungUp || errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF) {
			err = fmt.Errorf("%w (admin.socket is for the node's administrators: run this as root, or from an elevated prompt)", err)
		}
		return nil, fmt.Errorf("%w at %s: %w", errNotAnswering, c.cfg.Socket, err)
	}
	return res, nil
}

// cancelOnClose ends a request's context when its answer is read.
type cancelOnClose struct {
	io.ReadCloser
	cancel func()
}

func (c cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
