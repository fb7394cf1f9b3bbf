package tracer

import (
	"os"
	"testing"
)

// TestLoad runs every BPF program through this kernel's verifier.
func TestLoad(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to load BPF programs (CI runs as root)")
	}
	for _, stacks := range []StackMode{StacksNone, StacksAll} {
		tr, err := New(Config{Stacks: stacks})
		if err != nil {
			t.Fatalf("load: %v", err)
		}
		if _, err := tr.Stats(); err != nil {
			t.Errorf("stats: %v", err)
		}
		tr.Close()
	}
}
