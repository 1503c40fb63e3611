package plugin

// Test helpers that look into the controller's state or wait on what the
// event path does not wait on (it is told nothing: the worker counts and
// logs its outcome).

// event hands the core a containerd event (what Started, Exited or Deleted
// sees) and returns where its final outcome arrives.
func (f *fixture) event(seen sighting) <-chan error {
	results := make(chan result, 1)
	seen.wait.ch = results
	f.core.enqueue(seen.pod.ID, seen)
	done := make(chan error, 1)
	go func() {
		select {
		case r := <-results:
			done <- r.err
		case <-f.core.closed:
			done <- ErrClosed
		}
	}()
	return done
}

func (f *fixture) started(id string) <-chan error { return f.event(startedEvent(id)) }
func (f *fixture) exited(id string) <-chan error  { return f.event(exitedEvent(id)) }
func (f *fixture) deleted(id string) <-chan error { return f.event(deletedEvent(id)) }

// counts is what the state holds.
type counts struct{ records, holding, tombstones int }

func (s *state) counts() counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	var c counts
	for _, r := range s.recs {
		c.records++
		if len(r.known.ports) > 0 {
			c.holding++
		}
		if r.in.stopped || r.known.final {
			c.tombstones++
		}
	}
	return c
}

// queued reports whether a sync of the sandbox is due (a trigger it has not
// seen), waited for, or retrying (the queue's count).
func (c *Core) queued(id string) bool {
	if c.q.NumRequeues(id) > 0 {
		return true
	}
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	r := c.st.recs[id]
	return r != nil && (len(r.in.waiters) > 0 || r.in.gen > r.known.synced)
}

// waiting reports whether a request waits for the sandbox's sync.
func (c *Core) waiting(id string) bool {
	c.st.mu.Lock()
	defer c.st.mu.Unlock()
	r := c.st.recs[id]
	return r != nil && len(r.in.waiters) > 0
}
