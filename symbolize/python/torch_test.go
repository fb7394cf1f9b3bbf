package python

import (
	"os"
	"strings"
	"testing"

	"github.com/cilium/ebpf/link"
	"github.com/cudatap/cudatap/internal/objfile"
)

// TestBPFTorch runs on a GPU machine: CUDATAP_TEST_TORCH names a python
// with PyTorch and CUDA. walk_python, attached to the CUDA calls behind a
// tensor's .item(), must name the Python lines that made them.
func TestBPFTorch(t *testing.T) {
	exe := os.Getenv("CUDATAP_TEST_TORCH")
	if exe == "" {
		t.Skip("set CUDATAP_TEST_TORCH to a python with PyTorch on a GPU machine")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	coll, rd, el := loadWalkBPF(t)
	tg := startTargetScript(t, exe, "testdata/torch_target.py")
	cfg, in, err := Detect(tg.pid)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Python %s in %s", in.Version(), in.Path())
	if err := coll.Maps["py_configs"].Put(uint32(tg.pid), cfg); err != nil {
		t.Fatal(err)
	}

	// Every CUDA call that may block on the way of .item(), in whichever
	// library defines it.
	syms := []string{"cudaStreamSynchronize", "cudaMemcpyAsync", "cudaDeviceSynchronize",
		"cuStreamSynchronize", "cuStreamSynchronize_ptsz", "cuMemcpyDtoHAsync_v2", "cuMemcpyAsync", "cuCtxSynchronize"}
	maps, err := objfile.ReadMaps(tg.pid)
	if err != nil {
		t.Fatal(err)
	}
	cache := objfile.NewCache(64)
	attached := 0
	for _, o := range objfile.ObjectFiles(maps) {
		if !strings.Contains(o.Path, "cud") && !strings.Contains(o.Path, "torch") {
			continue
		}
		f, err := cache.Open(o.OpenPath(tg.pid))
		if err != nil {
			continue
		}
		for _, s := range syms {
			if _, ok := f.LookupDynamic(s); !ok {
				continue
			}
			ex, err := link.OpenExecutable(o.Path)
			if err != nil {
				t.Fatal(err)
			}
			up, err := ex.Uprobe(s, coll.Programs["walk"], &link.UprobeOptions{PID: tg.pid})
			if err != nil {
				t.Logf("attach %s in %s: %v", s, o.Path, err)
				continue
			}
			t.Cleanup(func() { up.Close() })
			t.Logf("attached to %s in %s", s, o.Path)
			attached++
		}
	}
	if attached == 0 {
		t.Fatal("no CUDA call to attach to")
	}
	tg.send("go\n")
	tg.expect("done")
	want := []Frame{tg.frame("item", "sync_item"), tg.frame("step", "step"), tg.frame("loop", "<module>")}
	for i := 0; i < 20; i++ {
		ev := nextEvent(t, rd, el, tg.pid)
		got := in.Frames(ev.raw)
		t.Logf("event from thread %d:%s", ev.tid, framesString(got))
		if equalFrames(got, want) {
			return
		}
	}
	t.Fatalf("no event with frames%s", framesString(want))
}
