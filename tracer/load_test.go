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

// TestPruneInflight: entries of threads that are gone are deleted, others kept.
func TestPruneInflight(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to load BPF programs (CI runs as root)")
	}
	tr, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	m := tr.coll.Maps["inflight"]
	for _, tid := range []uint32{1, 2, 3} {
		if err := m.Put(cudatapInflightKey{Tid: tid, Api: 5}, cudatapInflight{}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := tr.PruneInflight(func(tid uint32) bool { return tid == 2 })
	if err != nil || n != 2 {
		t.Fatalf("pruned %d (%v), want 2", n, err)
	}
	var v cudatapInflight
	if err := m.Lookup(cudatapInflightKey{Tid: 2, Api: 5}, &v); err != nil {
		t.Errorf("live thread's entry gone: %v", err)
	}
}
