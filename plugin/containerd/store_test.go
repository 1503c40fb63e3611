package containerd

import (
	"errors"
	"path/filepath"
	"testing"
)

// Regression (load and faults, 3): after Close the store reconnected on
// the next call, so work still running at shutdown opened a new client.
func TestClosedStoreDoesNotReconnect(t *testing.T) {
	s := NewStore(filepath.Join(t.TempDir(), "containerd.sock"), "k8s.io")
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if c, err := s.Client(); !errors.Is(err, ErrClosed) || c != nil {
		t.Fatalf("Client after Close = %v, %v; want ErrClosed", c, err)
	}
}

func TestNetNSFromSpec(t *testing.T) {
	tests := []struct{ spec, want string }{
		{`{"windows":{"network":{"networkNamespace":"0452913B-E445-438B-8922-374E5A15C9B4"}}}`, "0452913B-E445-438B-8922-374E5A15C9B4"},
		{`{"linux":{}}`, ""},
		{`{"windows":{}}`, ""},
	}
	for _, tt := range tests {
		if got, err := netNSFromSpec([]byte(tt.spec)); err != nil || got.String() != tt.want {
			t.Errorf("netNSFromSpec(%s) = %q, %v; want %q", tt.spec, got, err, tt.want)
		}
	}
	if _, err := netNSFromSpec([]byte(`{`)); err == nil {
		t.Error("a broken spec decoded")
	}
}

func TestNetNSFromSpecIsCanonical(t *testing.T) {
	got, err := netNSFromSpec([]byte(`{"windows":{"network":{"networkNamespace":"{0452913b-e445-438b-8922-374e5a15c9b4}"}}}`))
	if err != nil || got != "0452913B-E445-438B-8922-374E5A15C9B4" {
		t.Fatalf("= %q, %v", got, err)
	}
}
