package containerd

import "sync"

// serialQueue runs functions in submission order per key and in parallel
// across keys: events of one sandbox must not overtake each other (a stop
// handled before its start would leave an endpoint behind), events of
// different sandboxes need not wait for each other.
type serialQueue struct {
	mu      sync.Mutex
	pending map[string][]func()
	wg      sync.WaitGroup
}

func (q *serialQueue) submit(key string, fn func()) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.pending == nil {
		q.pending = map[string][]func(){}
	}
	queue, running := q.pending[key]
	q.pending[key] = append(queue, fn)
	if running {
		return
	}
	q.wg.Add(1)
	go q.drain(key)
}

func (q *serialQueue) drain(key string) {
	defer q.wg.Done()
	for {
		q.mu.Lock()
		queue := q.pending[key]
		if len(queue) == 0 {
			delete(q.pending, key)
			q.mu.Unlock()
			return
		}
		fn := queue[0]
		q.pending[key] = queue[1:]
		q.mu.Unlock()
		fn()
	}
}

// wait blocks until every submitted function has run.
func (q *serialQueue) wait() { q.wg.Wait() }
