package probe

import (
	"testing"

	"github.com/cudatap/cudatap/internal/testutil"
)

// TestLoad runs every BPF program through this kernel's verifier: both
// program sets (uprobe_multi where the kernel has it, and per symbol).
func TestLoad(t *testing.T) {
	testutil.RequireRoot(t)
	for _, perSymbol := range []bool{false, true} {
		for _, stacks := range []StackMode{StacksNone, StacksAll} {
			tr, err := New(Config{Stacks: stacks, PerSymbolUprobes: perSymbol})
			if err != nil {
				t.Fatalf("load (per symbol %v): %v", perSymbol, err)
			}
			if want := !perSymbol && Features().UprobeMulti; tr.multi != want {
				t.Errorf("per symbol %v: multi %v, want %v", perSymbol, tr.multi, want)
			}
			st, err := tr.Stats()
			if err != nil {
				t.Errorf("stats: %v", err)
			}
			if st != (Stats{}) {
				t.Errorf("counters of a tracer that attached nothing: %+v", st)
			}
			if err := tr.Close(); err != nil {
				t.Errorf("close: %v", err)
			}
		}
	}
}

// TestFeatures: a root test machine can run cudatap, and says so.
func TestFeatures(t *testing.T) {
	testutil.RequireRoot(t)
	f := Features()
	if len(f.MissingCapabilities) != 0 || !f.Probed || f.Kernel == "" {
		t.Errorf("features as root: %+v", f)
	}
	if p := f.Problems(); len(p) != 0 {
		t.Errorf("problems on a machine that loads cudatap: %q", p)
	}
	if p := (FeatureSet{Probed: true}).Problems(); len(p) != 3 {
		t.Errorf("nothing supported: %q, want 3 problems", p)
	}
}

// TestPruneInflight: entries of threads that are gone are deleted, others kept.
func TestPruneInflight(t *testing.T) {
	testutil.RequireRoot(t)
	tr, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	m := tr.maps.Inflight
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
