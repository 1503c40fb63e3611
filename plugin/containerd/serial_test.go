package containerd

import (
	"sync"
	"testing"
	"time"
)

func TestSerialQueueKeepsOrderPerKey(t *testing.T) {
	var q serialQueue
	var mu sync.Mutex
	got := map[string][]int{}
	for i := range 200 {
		key := []string{"a", "b", "c"}[i%3]
		q.submit(key, func() {
			if i%7 == 0 {
				time.Sleep(time.Millisecond) // let other keys overtake
			}
			mu.Lock()
			got[key] = append(got[key], i)
			mu.Unlock()
		})
	}
	q.wait()
	for key, seq := range got {
		for j := 1; j < len(seq); j++ {
			if seq[j] < seq[j-1] {
				t.Fatalf("key %s ran %d after %d", key, seq[j], seq[j-1])
			}
		}
	}
	if n := len(got["a"]) + len(got["b"]) + len(got["c"]); n != 200 {
		t.Fatalf("%d functions ran, want 200", n)
	}
}

func TestSerialQueueRunsKeysInParallel(t *testing.T) {
	var q serialQueue
	block := make(chan struct{})
	ran := make(chan struct{})
	q.submit("slow", func() { <-block })
	q.submit("fast", func() { close(ran) })
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("a blocked key held up another key")
	}
	close(block)
	q.wait()
}
