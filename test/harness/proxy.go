package harness

import (
	"io"
	"net"
	"os"
	"sync"
)

// connProxy forwards a unix socket (or a loopback TCP port) to a unix
// socket and can drop every connection at once. The NRI adaptation does not
// close external plugin connections on Stop (in containerd the process dies
// and the kernel closes them); the proxy reproduces that "runtime went away"
// for a test. On TCP it is the relay that lets the Windows build, under
// wine, reach containerd: wine's named pipes do not work with go-winio, and
// containerd's own tcp_address serves none of the API the plugin uses.
type connProxy struct {
	l       net.Listener
	backend string
	mu      sync.Mutex
	conns   map[net.Conn]bool
}

func newConnProxy(front, backend string) (*connProxy, error) {
	_ = os.Remove(front)
	l, err := net.Listen("unix", front)
	if err != nil {
		return nil, err
	}
	return proxyFrom(l, backend), nil
}

// newTCPRelay listens on a free loopback port and forwards to backend.
func newTCPRelay(backend string) (*connProxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return proxyFrom(l, backend), nil
}

func proxyFrom(l net.Listener, backend string) *connProxy {
	p := &connProxy{l: l, backend: backend, conns: map[net.Conn]bool{}}
	go p.serve()
	return p
}

func (p *connProxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("unix", p.backend)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[b] = true, true
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
		}
		go pipe(b, c)
		go pipe(c, b)
	}
}

// drop closes every proxied connection.
func (p *connProxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

func (p *connProxy) close() {
	p.l.Close()
	p.drop()
}
