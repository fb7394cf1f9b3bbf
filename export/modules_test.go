package export

import (
	"path/filepath"
	"testing"

	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
)

// The profile WritePprof writes maps each native frame with the mapping
// the tracer recorded for its process: exact range, offset and build ID.
func TestWritePprofRecordedMappings(t *testing.T) {
	const pid, ret = 3, 0x7f00_0000_2345
	lib := model.Mapping{File: "/venv/lib/libtorch_cuda.so", BuildID: "0badc0de", Start: 0x7f00_0000_1000, Limit: 0x7f00_0010_0000, Offset: 0x1000}
	other := model.Mapping{File: "/usr/lib/libc.so.6", BuildID: "c0ffee", Start: 0x7f00_0000_1000, Limit: 0x7f00_0010_0000} // another process's
	n := model.NewNames()
	n.Procs[pid] = model.ProcessInfo{Comm: "python3", Cmdline: "/usr/bin/python3 train.py"}
	n.Frames[model.NameKey{PID: pid, Key: ret}] = "at::native::sync (libtorch_cuda.so)"
	n.Mappings[model.NameKey{PID: pid, Key: lib.Start}] = lib
	n.Mappings[model.NameKey{PID: pid + 1, Key: other.Start}] = other
	p := &model.Process{PID: pid, Threads: map[uint32]struct{}{pid: {}}, Stacks: [][]uint64{{ret}}}
	agg := NewAggregates()
	agg.Profile.Call(p, &model.Call{API: event.CudaDeviceSynchronize, TID: pid, Start: 1, End: 2, Stream: -1, GPUOp: -1, HasRet: true, Stack: 0, PyStack: -1})
	r := &model.Result{Processes: []*model.Process{p}, Start: 1, End: 2}
	r.Name(n)
	path := filepath.Join(t.TempDir(), "p.pb.gz")
	if err := WritePprof([]Output{{Path: path, Format: Pprof}}, r, agg); err != nil {
		t.Fatal(err)
	}
	prof := testutil.ReadProfile(t, path)
	if len(prof.Mapping) != 1 {
		t.Fatalf("mappings %v, want the one of libtorch_cuda.so", prof.Mapping)
	}
	m := prof.Mapping[0]
	if m.File != lib.File || m.BuildID != lib.BuildID || m.Start != lib.Start || m.Limit != lib.Limit || m.Offset != lib.Offset {
		t.Errorf("mapping %+v, want %+v", m, lib)
	}
	if mods := Modules(n); len(mods) != 2 || mods[0].PID != pid || mods[1].PID != pid+1 || Modules(nil) != nil {
		t.Errorf("Modules: %+v", mods)
	}
}
