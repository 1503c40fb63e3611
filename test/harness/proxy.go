package harness

import (
	"io"
	"net"
	"os"
	"sync"
)

// connProxy forwards a unix socket to another one and can drop every
// connection at once. The NRI adaptation does not close external plugin
// connections on Stop (in containerd the process dies and the kernel closes
// them); the proxy reproduces that "runtime went away" for a test.
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
	p := &connProxy{l: l, backend: backend, conns: map[net.Conn]bool{}}
	go p.serve()
	return p, nil
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
