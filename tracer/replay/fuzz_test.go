package replay

import (
	"bufio"
	"bytes"
	"errors"
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/recording"
)

func FuzzRead(f *testing.F) {
	_, _, file := liveSession(f)
	f.Add(file)
	f.Add(file[:len(file)/2])
	f.Add(file[:100])
	// A small recording with a small header: the fuzzer mutates records, not JSON.
	var buf bytes.Buffer
	w, _ := recording.NewWriter(&buf, recording.Header{Version: recording.Version})
	w.Process(1, model.ProcessInfo{Comm: "x"})
	w.Thread(1, 1, "t")
	w.Mapping(1, model.Mapping{File: "/x/libcudart.so.13", BuildID: "ab", Start: 0x1000, Limit: 0x2000, Offset: 0x1000})
	for i, e := range []event.Event{
		mk(event.CudaStreamCreate, 1, 1, 10, 5, 0x7ffd0000),
		mk(event.CudaLaunchKernel, 1, 1, 20, 0, 0x401000, 1, 1, 1, 1, 0, 0, 0xa0),
		mk(event.CudaStreamWaitEvent, 1, 1, 25, 0, 0xa0, 0xe1),
		mk(event.CudaMemcpyAsync, 1, 1, 30, 100_000, 0x10, 0x20, 8, 2, 0xa0),
		mk(event.CudaStreamQuery, 1, 1, 40, 5, 0xa0),
		mk(event.CudaStreamSynchronize, 1, 1, 50, 100_000, 0xa0),
	} {
		e.Out = uint64(0xa0 * (i + 1))
		w.Event(event.Encode(nil, &e))
	}
	w.Counter(recording.Counter{Name: "c", Values: map[string]float64{"v": 1}})
	w.Drops(model.Drops{Submitted: 6, Received: 6})
	w.Close()
	f.Add(buf.Bytes())
	f.Add([]byte("CUDATAP\n\x01\x00\x00\x00\x02\x00\x00\x00{}"))
	f.Add([]byte("CUDATAP\n\x01\x00\x00\x00\x02\x00\x00\x00{}\x01\xff\xff\xff\xff\x0f"))
	f.Add([]byte{})

	br := bufio.NewReaderSize(nil, 1<<20)
	f.Fuzz(func(t *testing.T, b []byte) {
		br.Reset(bytes.NewReader(b))
		col := model.NewCollector()
		m := model.New(col)
		_, err := ReadEvents(br, m, nil)
		if err != nil && !errors.Is(err, recording.ErrFormat) && !errors.Is(err, recording.ErrTruncated) {
			t.Fatalf("error %v is neither ErrFormat nor ErrTruncated", err)
		}
		res := m.Finish()
		for _, p := range res.Processes {
			tr := col.Traces[p.PID]
			if tr == nil {
				continue
			}
			for i, op := range tr.GPUOps {
				if op.ID != i || op.End < op.Start || op.Call < 0 || op.Call >= len(tr.Calls) || op.After >= i {
					t.Fatalf("op %d: %+v", i, op)
				}
			}
		}
		res2, rp2, err2 := Load(bytes.NewReader(b), nil, nil)
		if (err == nil) != (err2 == nil) || (rp2 != nil && res2 == nil) {
			t.Fatalf("ReadEvents: %v, Load: %v", err, err2)
		}
	})
}
