package replay

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/recording"
)

// TestNamesBounded: a recording can name any number of frames and
// threads (one small record each): past maxNames in all, or a table's own
// bound, the names are not kept, counted, and the count reaches the
// result's limits.
func TestNamesBounded(t *testing.T) {
	const extraThreads, extra = 5, 10
	var buf bytes.Buffer
	w, _ := recording.NewWriter(&buf, recording.NewHeader("test", 0))
	for i := range maxThreadNames + extraThreads {
		w.Thread(1, uint32(i), "t")
	}
	for i := range maxNames - maxThreadNames + extra {
		w.Frame(1, uint64(i), "f")
	}
	e := event.Event{Cookie: event.Lookup(event.CudaLaunchKernel).Cookie(0), PID: 1, TID: 1, Start: 1000}
	w.Event(event.Encode(nil, &e))
	w.Close()
	res, rp, err := Load(bytes.NewReader(buf.Bytes()), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := rp.Names
	if len(n.Threads) != maxThreadNames || len(n.Threads)+len(n.Frames) != maxNames || rp.NamesNotKept != extraThreads+extra || res.Drops.Limits.Names != extraThreads+extra {
		t.Errorf("%d thread and %d frame names kept, %d not (result: %d); want %d and %d, %d not",
			len(n.Threads), len(n.Frames), rp.NamesNotKept, res.Drops.Limits.Names, maxThreadNames, maxNames-maxThreadNames, extraThreads+extra)
	}
	if !strings.Contains(res.Drops.Limits.Describe(), "15 names not kept") {
		t.Errorf("limits say %q", res.Drops.Limits.Describe())
	}
}

// TestCountersThinned: past maxCounters the NVML series are thinned, every
// track alike and over the whole recording; samples of tracks past
// maxTracks and values past maxValues are left out. All is counted.
func TestCountersThinned(t *testing.T) {
	var buf bytes.Buffer
	w, _ := recording.NewWriter(&buf, recording.NewHeader("test", 0))
	const polls = maxCounters/2 + 1000 // two devices: past the bound
	wide := map[string]float64{}
	for i := range maxValues + 3 {
		wide[fmt.Sprintf("v%03d", i)] = 1
	}
	for i := range polls {
		for d := range 2 {
			values := map[string]float64{"util": 1}
			if i == 0 {
				values = wide
			}
			w.Counter(recording.Counter{Device: d, Name: fmt.Sprintf("GPU %d", d), TS: uint64(1e9 + i*10_000_000), Values: values})
		}
	}
	for d := range maxTracks + 5 { // new tracks: all but 3 fit
		w.Counter(recording.Counter{Device: 10 + d, Name: "x", TS: 2e9, Values: map[string]float64{"v": 1}})
	}
	w.Close()
	rp, err := ReadNames(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	written := uint64(2*polls + maxTracks + 5)
	if n := uint64(len(rp.Counters)); n >= maxCounters || n+rp.CountersThinned != written {
		t.Fatalf("%d samples kept, %d thinned; want fewer than %d, %d in all", n, rp.CountersThinned, maxCounters, written)
	}
	perTrack := map[int]int{}
	var first, last uint64
	for i, c := range rp.Counters {
		if i > 0 && c.TS < rp.Counters[i-1].TS {
			t.Fatalf("sample %d out of time order", i)
		}
		if c.Device < 2 {
			perTrack[c.Device]++
			if first == 0 {
				first = c.TS
				if len(c.Values) != maxValues {
					t.Errorf("the first sample keeps %d values, want %d", len(c.Values), maxValues)
				}
			}
			last = c.TS
		}
	}
	if perTrack[0] != perTrack[1] || perTrack[0] < polls/4 || first != 1e9 || last < 1e9+uint64(polls-100)*10_000_000 {
		t.Errorf("kept %v per device from %d to %d: want both alike, over the whole recording", perTrack, first, last)
	}
	if got := len(rp.Counters) - perTrack[0] - perTrack[1]; got != maxTracks-2 {
		t.Errorf("%d samples of the other tracks, want %d (the bound on tracks)", got, maxTracks-2)
	}
	// The result says so too.
	res, _, _ := Load(bytes.NewReader(buf.Bytes()), func(*Replay) model.Sink { return nil }, nil)
	if res.Drops.Limits.Samples != rp.CountersThinned || !strings.Contains(res.Drops.Limits.Describe(), "NVML samples thinned out") {
		t.Errorf("result limits %+v", res.Drops.Limits)
	}
}

// TestGPUReportBounded: the NVML report's lists are cut to their bounds
// (the summary judges every traced process against every device), and
// what is cut is counted.
func TestGPUReportBounded(t *testing.T) {
	g := model.GPUReport{}
	for i := range maxGPUs + 2 {
		g.GPUs = append(g.GPUs, model.GPUStats{Index: i, Name: "x"})
	}
	for i := range maxGPUProcs + 1 {
		g.GPUs[0].Processes = append(g.GPUs[0].Processes, model.GPUProcess{PID: uint32(i)})
	}
	for i := range maxTraced + 3 {
		g.Traced = append(g.Traced, model.TracedHost{PID: uint32(i)})
	}
	var buf bytes.Buffer
	w, _ := recording.NewWriter(&buf, recording.NewHeader("test", 0))
	w.GPU(g)
	w.Close()
	res, rp, err := Load(bytes.NewReader(buf.Bytes()), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := res.GPU
	if len(got.GPUs) != maxGPUs || len(got.GPUs[0].Processes) != maxGPUProcs || len(got.Traced) != maxTraced || rp.GPUNotKept != 2+1+3 {
		t.Errorf("%d GPUs, %d processes on the first, %d traced, %d not kept; want %d, %d, %d, 6",
			len(got.GPUs), len(got.GPUs[0].Processes), len(got.Traced), rp.GPUNotKept, maxGPUs, maxGPUProcs, maxTraced)
	}
	if res.Drops.Limits.GPUReport != 6 {
		t.Errorf("result limits %+v", res.Drops.Limits)
	}
}
