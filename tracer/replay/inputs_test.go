package replay

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/recording"
)

// host writes a small recording of one process (pid 100) whose clock
// starts at base: a stream created, a launch, a sync, a hold, GPU times
// measuring the launch, an NVML sample and the GPU report.
func host(t *testing.T, base uint64, comm string, wall int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := recording.NewWriter(&buf, recording.NewHeader("t", wall))
	if err != nil {
		t.Fatal(err)
	}
	w.Process(100, model.ProcessInfo{Comm: comm})
	w.Thread(100, 100, comm+"-main")
	w.Kernel(100, 0x401000, "_Z1kv")
	w.PyFrame(100, 0xc0de, 1, comm+".py:1 f")
	w.GPUTimes(recording.GPUTimesStart, 100, 0, nil)
	w.Hold(100, 100, base+100, base+200)
	ev := func(e event.Event) { w.Event(event.Encode(nil, &e)) }
	e := mk(event.CudaStreamCreateWithFlags, 100, 100, base, 1000, 0x7ffd0000, 1)
	e.Out = 0xa0
	ev(e)
	for i := range uint64(10) {
		at := base + (i+1)*ms
		l := mk(event.CudaLaunchKernel, 100, 100, at, 0, 0x401000, 1|1<<32, 1, 1|1<<32, 1, 0, 0, 0xa0)
		l.End, l.Flags = at+2000, event.FlagHasRet
		ev(l)
		ev(mk(event.CudaStreamSynchronize, 100, 100, at+10_000, 200_000, 0xa0))
		w.GPUTimes(recording.GPUTimesMeasure, 100, 0, &model.Measurement{TID: 100, APIStart: at + 100, APIEnd: at + 1900,
			Start: at + 20_000, End: at + 150_000, Kind: model.OpKernel, Device: 0})
	}
	w.GPUTimes(recording.GPUTimesMark, 100, base+20*ms, nil)
	w.GPUTimes(recording.GPUTimesStop, 100, 0, nil)
	w.Counter(recording.Counter{Name: "GPU 0", Device: 0, TS: base + 5*ms, Values: map[string]float64{"util": 50}})
	w.GPU(model.GPUReport{GPUs: []model.GPUStats{{Index: 0, Name: "H200", StartNs: base, EndNs: base + 10*ms}},
		Traced: []model.TracedHost{{PID: 100, CUDACalls: 21}}})
	w.Drops(model.Drops{Submitted: 21, Received: 21, OrphanReturns: 1})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// order is a sink noting the pid and start of every call in the order the
// model hands them over.
type order struct {
	model.Discard
	calls [][2]uint64
}

func (o *order) Call(p *model.Process, c *model.Call) {
	o.calls = append(o.calls, [2]uint64{uint64(p.PID), c.Start})
}

// TestLoadInputsMerge replays two hosts' recordings of the same pid as one
// timeline: the second shifted and renumbered; every timestamp moves (calls,
// measured GPU times, holds, samples, the GPU report), names follow the new
// pid, the calls of both come interleaved by time, and a recording written
// from the replay (recording.Writer.Copy) replays to the same.
func TestLoadInputsMerge(t *testing.T) {
	const shift = 3_700_000_000 - 5*ms
	a := host(t, 10_000*ms, "a", 100)
	b := host(t, 10_000*ms-shift+ms/2, "b", 200) // lands 0.5 ms after a's
	tb := Transform{ShiftNs: shift, PIDs: map[uint32]uint32{100: 1 << 22}, Devices: 100, DevicePrefix: "b: "}
	col, ord := model.NewCollector(), &order{}
	var merged bytes.Buffer
	var mw *recording.Writer
	res, all, rps, err := LoadInputs([]Input{{R: bytes.NewReader(a)}, {R: bytes.NewReader(b), Transform: tb}},
		func(rp *Replay) model.Sink {
			h := rp.Header
			h.WallOffsetNs = 100
			var err error
			if mw, err = recording.NewWriter(&merged, h); err != nil {
				t.Fatal(err)
			}
			mw.Names(rp.Names, false)
			return model.Sinks{col, ord}
		}, LoadOptions{Record: func(_ int, rs *Records) { mw.Copy(rs.Reader) }})
	if err != nil {
		t.Fatal(err)
	}
	if len(rps) != 2 || rps[1].Header.WallOffsetNs != 200 || res.WallOffsetNs != 100 {
		t.Fatalf("replays %d, wall offsets %d %d", len(rps), rps[1].Header.WallOffsetNs, res.WallOffsetNs)
	}
	ta, tbr := col.Traces[100], col.Traces[1<<22]
	if ta == nil || tbr == nil || len(ta.Calls) != 21 || len(tbr.Calls) != 21 {
		t.Fatalf("traces %v", col.Traces)
	}
	for i := range ta.Calls {
		if d := tbr.Calls[i].Start - ta.Calls[i].Start; d != ms/2 {
			t.Fatalf("call %d of b starts %d ns after a's, want %d", i, d, ms/2)
		}
	}
	for i, op := range tbr.GPUOps {
		if !op.Measured || op.Start != ta.GPUOps[i].Start+ms/2 || op.End != ta.GPUOps[i].End+ms/2 {
			t.Fatalf("op %d: %+v vs %+v", i, op, ta.GPUOps[i])
		}
	}
	if len(tbr.Holds) != 1 || tbr.Holds[0].Start != ta.Holds[0].Start+ms/2 {
		t.Errorf("holds %+v %+v", ta.Holds, tbr.Holds)
	}
	for i := 1; i < len(ord.calls); i++ {
		if ord.calls[i][1] < ord.calls[i-1][1] {
			t.Fatalf("calls not interleaved by time: %v", ord.calls)
		}
	}
	n := res.Names
	if n.Procs[1<<22].Comm != "b" || n.Procs[100].Comm != "a" || n.Thread(1<<22, 100) != "b-main" ||
		n.PyFrame(1<<22, model.PyKey{Code: 0xc0de, Instr: 1}) != "b.py:1 f" || n.Kernel(1<<22, 0x401000) != "_Z1kv" {
		t.Errorf("names %+v", n)
	}
	if c := res.Counters; len(c) != 2 || c[0].Device != 0 || c[1].Device != 100 || c[1].Name != "b: GPU 0" || c[1].TS != c[0].TS+ms/2 {
		t.Errorf("counters %+v", c)
	}
	g := res.GPU
	if len(g.GPUs) != 2 || g.GPUs[1].Index != 100 || g.GPUs[1].Name != "b: H200" || g.GPUs[1].StartNs != g.GPUs[0].StartNs+ms/2 ||
		g.Traced[1].PID != 1<<22 || g.Status != "" {
		t.Errorf("GPU report %+v", g)
	}
	if res.Drops.Submitted != 42 || res.Drops.OrphanReturns != 2 || all.Records != rps[0].Records+rps[1].Records {
		t.Errorf("drops %+v, records %d", res.Drops, all.Records)
	}

	// The merged recording replays to the same calls, ops and names.
	for _, c := range res.Counters {
		mw.Counter(c)
	}
	mw.GPU(res.GPU)
	mw.Drops(res.Drops)
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	col2 := model.NewCollector()
	res2, _, err := Load(bytes.NewReader(merged.Bytes()), func(*Replay) model.Sink { return col2 }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(col2, col) {
		t.Error("the merged recording replays differently")
	}
	if !reflect.DeepEqual(res2.Names, res.Names) || !reflect.DeepEqual(res2.Counters, res.Counters) || res2.Drops != res.Drops {
		t.Errorf("merged recording: names, counters or drops differ\n%+v\n%+v", res2.Drops, res.Drops)
	}
	if pids := []uint32{res2.Processes[0].PID, res2.Processes[1].PID}; !slices.Equal(pids, []uint32{100, 1 << 22}) {
		t.Errorf("processes %v", pids)
	}
}

// TestLoadInputsTruncated: a cut input contributes what it holds, and the
// error names it; the others replay whole.
func TestLoadInputsTruncated(t *testing.T) {
	a, b := host(t, 10*ms, "a", 0), host(t, 10*ms, "b", 0)
	col := model.NewCollector()
	_, _, rps, err := LoadInputs([]Input{{R: bytes.NewReader(a)}, {R: bytes.NewReader(b[:len(b)*2/3]),
		Transform: Transform{PIDs: map[uint32]uint32{100: 7}}}}, func(*Replay) model.Sink { return col }, LoadOptions{})
	var ie *InputError
	if !errors.As(err, &ie) || ie.Input != 1 || !errors.Is(err, recording.ErrTruncated) {
		t.Fatalf("err %v", err)
	}
	if len(col.Traces[100].Calls) != 21 || len(col.Traces[7].Calls) == 0 || len(col.Traces[7].Calls) >= 21 || rps[1].Records == 0 {
		t.Errorf("calls %d and %d", len(col.Traces[100].Calls), len(col.Traces[7].Calls))
	}
}
