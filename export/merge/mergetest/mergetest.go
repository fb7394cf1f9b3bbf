// Package mergetest writes the recordings of a simulated multi-host NCCL
// job, for the tests of export/merge and of the CLI: each host records one
// rank on its own monotonic clock, offset from the others by a known
// amount, with a wall-clock offset that is wrong by a known amount.
package mergetest

import (
	"bytes"
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/recording"
)

const (
	us = int64(1_000)
	ms = int64(1_000_000)
	s  = int64(1_000_000_000)
)

// The job: each host records one rank as pid 100 (the pids collide) on
// its own monotonic clock; true time is the clock of a host with Clock 0.
const (
	PID      = 100
	Comm     = 0x5eed // the communicator's unique id
	commH    = 0xc0   // its handle in each process
	commStr  = 0xa0   // the stream its collectives run on
	copyStr  = 0xb0
	trueWall = int64(1_764_000_000) * s // Unix time − true time
	period   = 100 * ms
	jobStart = 1_000 * s // true time of the first meeting
)

// Host is one host of the job.
type Host struct {
	Name    string
	Rank    int
	Clock   int64 // its monotonic clock minus true time, ns
	WallErr int64 // error of the wall-clock offset it recorded, ns
	NoNCCL  bool  // a process that never makes a communicator
	// SkipFirst: its recording begins after the job's first SkipFirst
	// collectives (it numbers the next one 0).
	SkipFirst int
	// BootID is written in its header ("": a recording made before
	// headers had one). Hosts with the same one must have the same Clock.
	BootID string
	// PID of its process (PID when 0).
	PID uint32
	// NoSync: it never synchronizes after its collectives, so none is
	// proven complete on its host.
	NoSync bool
}

// Theta is the offset that puts h's timestamps on true time.
func (h Host) Theta() int64 { return -h.Clock }

// Job is the simulated job.
type Job struct {
	Hosts    []Host
	Meetings int
	// Rank LateRank arrives Late after the others at every meeting; with
	// Jitter, at every tenth meeting another rank is 5 ms late instead
	// (each in turn), as happens in real jobs.
	LateRank int
	Late     int64
	Jitter   bool
	// GPUTimes: the collectives' GPU times are measured (--gpu-times).
	GPUTimes bool
}

// Python frames the ranks record.
const (
	pyLoad    = 0x1000 // train.py:42 load_batch
	pyStep    = 0x2000 // train.py:57 step
	pyLibrary = 0x3000 // torch's all_reduce, in site-packages
)

// arrival is when rank r arrives at meeting k, true time.
func (j *Job) arrival(k, r int) int64 {
	t := jobStart + int64(k)*period
	if n := len(j.ncclHosts()); j.Jitter && k%10 == 5 && n > 0 {
		if r == (k/10)%n {
			return t + 5*ms
		}
		return t
	}
	if r == j.LateRank {
		return t + j.Late
	}
	return t
}

// done is when meeting k's collective ends on the GPU of rank r: 0.5 ms
// after the last rank arrived, within a few µs across ranks.
func (j *Job) done(k, r int) int64 {
	last := int64(0)
	for _, h := range j.Hosts {
		if !h.NoNCCL {
			last = max(last, j.arrival(k, h.Rank))
		}
	}
	return last + 500*us + int64((k*7+r*3)%5)*us
}

// record writes host h's recording to dir and returns its path.
func (j *Job) record(t testing.TB, dir string, h Host) string {
	t.Helper()
	var buf bytes.Buffer
	hdr := recording.NewHeader("cudatap-test", trueWall-h.Clock+h.WallErr)
	hdr.Host, hdr.BootID = h.Name, h.BootID
	w, err := recording.NewWriter(&buf, hdr)
	if err != nil {
		t.Fatal(err)
	}
	local := func(tt int64) uint64 { return uint64(tt + h.Clock) }
	pid := cmp.Or(h.PID, PID)
	w.Process(pid, model.ProcessInfo{Comm: "python3"})
	w.Thread(pid, pid, "python3")
	w.PyFrame(pid, pyLoad, 0, "train.py:42 load_batch")
	w.PyFrame(pid, pyStep, 0, "train.py:57 step")
	w.PyFrame(pid, pyLibrary, 0, "/venv/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py:2501 all_reduce")
	ev := func(e event.Event) { w.Event(event.Encode(nil, &e)) }
	call := func(api event.API, start, end int64, args ...uint64) event.Event {
		sp := event.Lookup(api)
		e := event.Event{Cookie: sp.Cookie(0), PID: pid, TID: pid, Start: local(start)}
		copy(e.Args[:], args)
		if sp.Return {
			e.End, e.Flags = local(end), event.FlagHasRet
		}
		return e
	}
	python := func(e event.Event, frames ...uint64) event.Event {
		e.Cookie |= event.CookieStack
		e.HasStack = true
		e.NPy = len(frames)
		for i, f := range frames {
			e.Py[i] = [2]uint64{f, 0}
		}
		return e
	}
	if j.GPUTimes {
		w.GPUTimes(recording.GPUTimesStart, pid, 0, nil)
	}
	if !h.NoNCCL {
		e := call(event.NcclCommInitRank, jobStart-s, jobStart-s+ms, 0, uint64(len(j.ncclHosts())), uint64(h.Rank), 0, 0, 0, Comm)
		e.Out = commH
		ev(e)
	}
	for k := h.SkipFirst; k < j.Meetings; k++ {
		a := j.arrival(k, h.Rank)
		if h.NoNCCL {
			a = jobStart + int64(k)*period
		}
		// The batch is copied in 2 ms before the rank arrives.
		ev(python(call(event.CudaMemcpyAsync, a-2*ms, a-2*ms+100*us, 0x7f00_0000_0000, 0x5500_0000_0000, 4096, 1, copyStr), pyLoad, pyStep))
		if h.NoNCCL {
			ev(call(event.CudaStreamSynchronize, a+50*us, a+ms, copyStr))
			continue
		}
		coll := call(event.NcclAllReduce, a, a, 0x7f10_0000_0000, 0x7f10_0000_0000, 1<<20, 7, 0, commH, commStr)
		ev(python(coll, pyLibrary, pyStep))
		done := j.done(k, h.Rank)
		if !h.NoSync {
			ev(call(event.CudaStreamSynchronize, a+50*us, done+300*us, commStr))
		}
		if j.GPUTimes {
			w.GPUTimes(recording.GPUTimesMeasure, pid, 0, &model.Measurement{TID: pid, APIStart: local(a), APIEnd: local(a),
				Start: local(a + 100*us), End: local(done), Kind: model.OpKernel, Device: 0})
			w.GPUTimes(recording.GPUTimesMark, pid, local(done+2*s), nil)
		}
	}
	if j.GPUTimes {
		w.GPUTimes(recording.GPUTimesStop, pid, 0, nil)
	}
	w.Counter(recording.Counter{Device: 0, Name: "GPU 0 NVIDIA H200", TS: local(jobStart), Values: map[string]float64{"util": 90}})
	w.Drops(model.Drops{Submitted: uint64(3 * j.Meetings), Received: uint64(3 * j.Meetings)})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-rank%d.cudatap", h.Name, h.Rank))
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func (j *Job) ncclHosts() []Host {
	var out []Host
	for _, h := range j.Hosts {
		if !h.NoNCCL {
			out = append(out, h)
		}
	}
	return out
}

// Write records every host of the job into dir and returns the paths.
func (j *Job) Write(t testing.TB, dir string) []string {
	var paths []string
	for _, h := range j.Hosts {
		paths = append(paths, j.record(t, dir, h))
	}
	return paths
}

// ThreeHosts: host B's monotonic clock is 3.7 s ahead of A's and its wall
// offset 25 ms wrong; host C's 1.2 s behind, its wall offset 40 ms wrong
// the other way. Rank 1 (on B) arrives 20 ms late.
func ThreeHosts() *Job {
	return &Job{
		Hosts: []Host{
			{Name: "nodeA", Rank: 0, BootID: "boot-a"},
			{Name: "nodeB", Rank: 1, Clock: 3_700 * ms, WallErr: 25 * ms, BootID: "boot-b"},
			{Name: "nodeC", Rank: 2, Clock: -1_200 * ms, WallErr: -40 * ms, BootID: "boot-c"},
		},
		Meetings: 200, LateRank: 1, Late: 20 * ms, Jitter: true,
	}
}

// OneHost: two ranks recorded apart on one host, one boot (one clock),
// rank 1 late by late at each of 10 all-reduces; rank 1's wall-clock
// offset, read at its recording's start, wallErr off rank 0's (NTP slews
// the wall clock between the two readings).
func OneHost(late, wallErr int64) *Job {
	return &Job{
		Hosts: []Host{
			{Name: "node", Rank: 0, BootID: "boot-1", PID: 100},
			{Name: "node", Rank: 1, BootID: "boot-1", PID: 101, WallErr: wallErr},
		},
		Meetings: 10, LateRank: 1, Late: late,
	}
}
