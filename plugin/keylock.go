package plugin

import "sync"

// keyLock serializes work per key (sandbox ID) while letting different keys
// run in parallel. Entries are dropped when unused.
type keyLock struct {
	mu    sync.Mutex
	locks map[string]*keyEntry
}

type keyEntry struct {
	mu   sync.Mutex
	refs int
}

func (k *keyLock) lock(key string) func() {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyEntry{}
	}
	e := k.locks[key]
	if e == nil {
		e = &keyEntry{}
		k.locks[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return k.unlocker(key, e)
}

// unlocker releases e, dropping it when nobody else waits for key.
func (k *keyLock) unlocker(key string, e *keyEntry) func() {
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}

// tryLock locks key unless someone holds it.
func (k *keyLock) tryLock(key string) (func(), bool) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyEntry{}
	}
	if e := k.locks[key]; e != nil {
		k.mu.Unlock()
		return nil, false
	}
	e := &keyEntry{refs: 1}
	e.mu.Lock()
	k.locks[key] = e
	k.mu.Unlock()
	return k.unlocker(key, e), true
}

func (k *keyLock) size() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.locks)
}
