package plugin

import (
	"context"
	"sync"
)

// pendingOps tracks background start work per sandbox, so that a stop can
// cancel a start that is still retrying.
type pendingOps struct {
	mu sync.Mutex
	m  map[string]*pendingOp
}

type pendingOp struct{ cancel context.CancelFunc }

// set registers a start, cancelling an older one of the same sandbox.
func (p *pendingOps) set(id string, cancel context.CancelFunc) *pendingOp {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]*pendingOp{}
	}
	if old := p.m[id]; old != nil {
		old.cancel()
	}
	op := &pendingOp{cancel: cancel}
	p.m[id] = op
	return op
}

func (p *pendingOps) cancel(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if op := p.m[id]; op != nil {
		op.cancel()
		delete(p.m, id)
	}
}

// done forgets op unless a newer start replaced it.
func (p *pendingOps) done(id string, op *pendingOp) {
	p.mu.Lock()
	defer p.mu.Unlock()
	op.cancel()
	if p.m[id] == op {
		delete(p.m, id)
	}
}

func (p *pendingOps) size() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.m)
}
