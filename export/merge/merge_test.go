package merge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cudatap/cudatap/export/chrome"
	"github.com/cudatap/cudatap/export/merge/mergetest"
	"github.com/cudatap/cudatap/export/straggler"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/recording"
	"github.com/cudatap/cudatap/tracer/replay"
)

const ms = int64(time.Millisecond)

// checkAligned checks every input that met the others is within its
// uncertainty of the truth, and that uncertainty below most.
func checkAligned(t *testing.T, p *Plan, job *mergetest.Job, method string, most int64) {
	t.Helper()
	ref := job.Hosts[p.Reference]
	for i, h := range job.Hosts {
		a := p.Align[i]
		truth := h.Theta() - ref.Theta()
		if i == p.Reference {
			if a.Theta != 0 || a.Method != MethodReference {
				t.Errorf("reference %s: %+v", h.Name, a)
			}
			continue
		}
		if a.Clock != i { // on another input's clock: that input's offset
			if a.Theta != p.Align[a.Clock].Theta {
				t.Errorf("%s: %+v, not its clock's offset %v", h.Name, a, time.Duration(p.Align[a.Clock].Theta))
			}
			continue
		}
		if (method != "" && a.Method != method) || a.Uncertainty < 0 || a.Meetings == 0 {
			t.Errorf("%s: %+v, want method %s", h.Name, a, method)
			continue
		}
		if err := a.Theta - truth; err > a.Uncertainty || -err > a.Uncertainty {
			t.Errorf("%s: offset %v, truth %v: off by %v, more than its uncertainty %v", h.Name,
				time.Duration(a.Theta), time.Duration(truth), time.Duration(err), time.Duration(a.Uncertainty))
		}
		if a.Uncertainty > most {
			t.Errorf("%s: uncertainty %v, want at most %v", h.Name, time.Duration(a.Uncertainty), time.Duration(most))
		}
		if wallErr := a.Wall - truth; wallErr != h.WallErr-ref.WallErr {
			t.Errorf("%s: wall-clock offset off by %v, want %v", h.Name, time.Duration(wallErr), time.Duration(h.WallErr))
		}
	}
}

type trace struct {
	TraceEvents []struct {
		Ph, Name string
		PID      int
		TS       float64
		Args     map[string]any
	} `json:"traceEvents"`
	Cudatap struct {
		Merge Info `json:"merge"`
	} `json:"cudatap"`
}

// mergeTrace merges the plan into a Chrome trace and the stragglers.
func mergeTrace(t *testing.T, p *Plan, rec *bytes.Buffer) (*model.Result, trace, *straggler.Collector) {
	t.Helper()
	var js bytes.Buffer
	var cw *chrome.Writer
	st := straggler.NewCollector()
	info := p.Info()
	var recw io.Writer
	if rec != nil {
		recw = rec
	}
	res, err := p.Replay(context.Background(), recw, func(rp *replay.Replay) model.Sink {
		cw = chrome.NewWriter(&js, rp.Names, chrome.Options{Origins: info.Origins(), Merge: info.JSON()})
		return model.Sinks{cw, st}
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cw.Close(res); err != nil {
		t.Fatal(err)
	}
	var tr trace
	if err := json.Unmarshal(js.Bytes(), &tr); err != nil {
		t.Fatal(err)
	}
	return res, tr, st
}

// TestMergeThreeHosts: three hosts, clocks seconds apart, wall offsets 25
// and 40 ms wrong; rank 1 arrives 20 ms late (now and then rank 0 is the
// late one). The meetings place each host within a millisecond or two of
// the truth, well under the wall clocks' error; the merged trace has a
// process group per rank, named by host and real pid, distinct pids, the
// residual in its metadata; the stragglers name rank 1 and its Python
// lines.
func TestMergeThreeHosts(t *testing.T) {
	job := mergetest.ThreeHosts()
	paths := job.Write(t, t.TempDir())
	p, err := Scan(paths, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Reference != 0 {
		t.Errorf("reference %d, want the input holding rank 0", p.Reference)
	}
	checkAligned(t, p, job, MethodHost, 2*ms)
	res, tr, st := mergeTrace(t, p, nil)

	// Process groups per rank, pids distinct, hosts named.
	names := map[int]string{}
	for _, e := range tr.TraceEvents {
		if e.Ph == "M" && e.Name == "process_name" && e.PID < 1_000_000_000 {
			names[e.PID] = e.Args["name"].(string)
		}
	}
	want := map[int]string{
		mergetest.PID: "rank 0 of 3 — python3 (pid 100 on nodeA)",
		firstPID:      "rank 1 of 3 — python3 (pid 100 on nodeB)",
		firstPID + 1:  "rank 2 of 3 — python3 (pid 100 on nodeC)",
	}
	for pid, name := range want {
		if names[pid] != name {
			t.Errorf("process %d named %q, want %q (all: %v)", pid, names[pid], name, names)
		}
	}
	if len(res.Processes) != 3 {
		t.Errorf("%d processes", len(res.Processes))
	}
	// The residual is in the trace.
	m := tr.Cudatap.Merge
	if m.Reference != paths[0] || len(m.Inputs) != 3 {
		t.Fatalf("merge info %+v", m)
	}
	for i, in := range m.Inputs[1:] {
		if in.UncertaintyNs == nil || *in.UncertaintyNs != p.Align[i+1].Uncertainty || in.Method != MethodHost || in.Host != job.Hosts[i+1].Name ||
			in.OffsetNs != p.Align[i+1].Theta+p.Base || in.SkewNs == 0 || len(in.PIDs) != 1 || in.PIDs[0].HostPID != mergetest.PID {
			t.Errorf("input %d info %+v", i+1, in)
		}
	}
	// On the merged timeline, rank 1's all-reduce starts ~20 ms after
	// rank 0's.
	var r0, r1 []float64
	for _, e := range tr.TraceEvents {
		if e.Ph == "X" && e.Name == "ncclAllReduce" {
			switch e.PID {
			case mergetest.PID:
				r0 = append(r0, e.TS)
			case firstPID:
				r1 = append(r1, e.TS)
			}
		}
	}
	if len(r0) != job.Meetings || len(r1) != job.Meetings {
		t.Fatalf("%d and %d all-reduces", len(r0), len(r1))
	}
	if d := (r1[0] - r0[0]) * 1000; d < float64(18*ms) || d > float64(22*ms) {
		t.Errorf("rank 1 arrives %v after rank 0 on the merged timeline, want 20 ms ± the uncertainty", time.Duration(d))
	}

	// Each meeting on the communicator's track, named by its last rank.
	lastRank1 := 0
	meetings := 0
	for _, e := range tr.TraceEvents {
		if e.Ph == "X" && e.PID == chrome.CommPID(0) {
			meetings++
			if strings.HasSuffix(e.Name, ": rank 1 last") {
				lastRank1++
			}
		}
	}
	if meetings != job.Meetings || lastRank1 < job.Meetings*9/10 {
		t.Errorf("%d meetings on the communicator's track, %d with rank 1 last", meetings, lastRank1)
	}

	// The stragglers.
	comms := st.Comms()
	if len(comms) != 1 || comms[0].Meetings != job.Meetings || comms[0].Incomplete != 0 || comms[0].Straggler() != 1 {
		t.Fatalf("communicators %+v", comms)
	}
	// Rank 0 blocks in a sync after each all-reduce until rank 1, 20 ms
	// late, arrives: about 20 ms a meeting, never more than it was
	// recorded.
	if st := comms[0].Stats[0]; st.Collectives != job.Meetings || st.WaitedNs < uint64(job.Meetings)*18*uint64(ms) || st.WaitedNs > st.RecordedNs ||
		st.InFlightNs > st.RecordedNs {
		t.Errorf("rank 0 waited %v, %v in flight, of %v recorded", time.Duration(st.WaitedNs), time.Duration(st.InFlightNs), time.Duration(st.RecordedNs))
	}
	info := p.Info()
	var out strings.Builder
	st.ReportNamed(&out, straggler.Naming{Result: res, Origins: info.Where()})
	for _, s := range []string{"straggler: rank 1 (pid 100 on nodeB)", "before: cudaMemcpyAsync at train.py:42 load_batch", "at:     ncclAllReduce at train.py:57 step"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("report lacks %q:\n%s", s, out.String())
		}
	}
	var rep strings.Builder
	p.Report(&rep)
	for _, s := range []string{"on the clock of " + paths[0], "nodeB, pid 100 as 4194304, rank 1): shifted -3.69", "the nearest to the wall clocks' offset (-3.675 s",
		"NCCL meeting(s)", "the true offset is within ±"} {
		if !strings.Contains(rep.String(), s) {
			t.Errorf("plan report lacks %q:\n%s", s, rep.String())
		}
	}
}

// TestMergeAlwaysLate: two hosts; when rank 1 is late at every meeting,
// host-side meetings bound its host's offset tightly from one side only
// (nobody can finish before it arrives) and only by its lateness from the
// other (as far as the host can tell, it might as well arrive with the
// others on a clock 20 ms off): the range is about the lateness wide and
// holds the truth. Of it, the offset nearest the wall clocks' is taken:
// the wall clocks' own when they lie in it (5 ms off the truth, where the
// range's middle would be 10 ms off), else its nearest end (the wall
// clocks 25 ms off: outside, on the side the range ends just past the
// truth).
func TestMergeAlwaysLate(t *testing.T) {
	for _, wallErr := range []int64{25 * ms, -5 * ms} {
		job := mergetest.ThreeHosts()
		job.Hosts = job.Hosts[:2]
		job.Jitter = false
		job.Hosts[1].WallErr = wallErr
		p, err := Scan(job.Write(t, t.TempDir()), Options{})
		if err != nil {
			t.Fatal(err)
		}
		checkAligned(t, p, job, MethodHost, 22*ms)
		a, truth := p.Align[1], job.Hosts[1].Theta()
		if w := a.Hi - a.Lo; a.NoLo || a.NoHi || w < 19*ms || w > 22*ms {
			t.Errorf("wall clock %v off: range [%v, %v]: the meetings cannot tell 20 ms lateness from clock offset", time.Duration(wallErr),
				time.Duration(a.Lo), time.Duration(a.Hi))
		}
		inside := a.Wall >= a.Lo && a.Wall <= a.Hi
		switch {
		case inside && a.Theta != a.Wall:
			t.Errorf("wall clock %v off, inside the range: offset %v, want the wall clocks' %v", time.Duration(wallErr), time.Duration(a.Theta), time.Duration(a.Wall))
		case !inside && a.Theta != a.Lo && a.Theta != a.Hi:
			t.Errorf("wall clock %v off, outside the range [%v, %v]: offset %v, want its nearest end", time.Duration(wallErr),
				time.Duration(a.Lo), time.Duration(a.Hi), time.Duration(a.Theta))
		case a.Uncertainty != max(a.Theta-a.Lo, a.Hi-a.Theta):
			t.Errorf("uncertainty %v of offset %v in [%v, %v]", time.Duration(a.Uncertainty), time.Duration(a.Theta), time.Duration(a.Lo), time.Duration(a.Hi))
		}
		if wallErr == 25*ms && inside || wallErr != 25*ms && (!inside || (a.Theta-truth) != wallErr) {
			t.Errorf("wall clock %v off: range [%v, %v], truth %v", time.Duration(wallErr), time.Duration(a.Lo), time.Duration(a.Hi), time.Duration(truth))
		}
	}
}

// TestMergeGPUTimes: with the collectives' GPU end times measured, the
// offsets are known to microseconds.
func TestMergeGPUTimes(t *testing.T) {
	job := mergetest.ThreeHosts()
	job.GPUTimes = true
	p, err := Scan(job.Write(t, t.TempDir()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkAligned(t, p, job, MethodGPU, 10_000)
	_, _, st := mergeTrace(t, p, nil)
	if cs := st.Comms(); len(cs) != 1 || cs[0].Straggler() != 1 {
		t.Errorf("communicators %+v", cs)
	}
}

// TestMergeNoNCCL: a host whose process made no communicator stays where
// the wall clocks put it, and the plan says why.
func TestMergeNoNCCL(t *testing.T) {
	job := mergetest.ThreeHosts()
	job.Hosts[2].NoNCCL = true
	p, err := Scan(job.Write(t, t.TempDir()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := p.Align[2]
	if a.Method != MethodWall || a.Uncertainty != -1 || a.Theta != a.Wall || !strings.Contains(a.Note, "no NCCL communicator") {
		t.Errorf("no-NCCL host: %+v", a)
	}
	if p.Align[1].Method != MethodHost {
		t.Errorf("rank 1's host: %+v", p.Align[1])
	}
	var rep strings.Builder
	p.Report(&rep)
	if !strings.Contains(rep.String(), "wall clocks only") || !strings.Contains(rep.String(), "how well the hosts' clocks were synchronized") {
		t.Errorf("plan report:\n%s", rep.String())
	}
	if in := p.Info().Inputs[2]; in.UncertaintyNs != nil || in.Method != MethodWall {
		t.Errorf("info %+v", in)
	}
}

// TestMergeOnlyWallClocks: no input has NCCL: every one is placed by the
// wall clocks.
func TestMergeOnlyWallClocks(t *testing.T) {
	job := mergetest.ThreeHosts()
	for i := range job.Hosts {
		job.Hosts[i].NoNCCL = true
	}
	p, err := Scan(job.Write(t, t.TempDir()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range p.Align[1:] {
		if a.Method != MethodWall || a.Theta != job.Hosts[i+1].Theta()+job.Hosts[i+1].WallErr {
			t.Errorf("input %d: %+v", i+1, a)
		}
	}
}

// TestMergeMisnumbered: host B's recording began after the job's first
// three collectives, so its meeting numbers are three behind: the
// meetings contradict each other; B keeps its wall-clock offset and the
// plan says why.
func TestMergeMisnumbered(t *testing.T) {
	job := mergetest.ThreeHosts()
	job.Hosts[1].SkipFirst = 3
	p, err := Scan(job.Write(t, t.TempDir()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := p.Align[1]
	if a.Method != MethodWall || !strings.Contains(a.Note, "contradict") || !strings.Contains(a.Note, "misnumbered") {
		t.Errorf("misnumbered host: %+v", a)
	}
	if p.Align[2].Method != MethodHost {
		t.Errorf("host C: %+v", p.Align[2])
	}

	// Without the odd late rank 0 or 2, every meeting looks alike: three
	// meetings off is consistent, 300 ms away from the wall clocks, and
	// flagged.
	job.Jitter = false
	if p, err = Scan(job.Write(t, t.TempDir()), Options{}); err != nil {
		t.Fatal(err)
	}
	if a := p.Align[1]; a.Method != MethodHost || !strings.Contains(a.Note, "may be misnumbered") {
		t.Errorf("periodic misnumbered host: %+v", a)
	}
}

// TestMergeSameRank: a recording given twice holds every rank twice.
func TestMergeSameRank(t *testing.T) {
	paths := mergetest.ThreeHosts().Write(t, t.TempDir())
	_, err := Scan([]string{paths[0], paths[1], paths[1]}, Options{})
	if !errors.Is(err, ErrSameRank) || !strings.Contains(err.Error(), "both hold rank 1 of NCCL communicator 0000000000005eed") ||
		!strings.Contains(err.Error(), "give each rank's recording once") {
		t.Errorf("err %v", err)
	}
}

// TestMergeBadInput: a file that is not a recording, or cut inside its
// header, is refused with what to do; a truncated one is merged up to its
// cut, saying how much was read.
func TestMergeBadInput(t *testing.T) {
	dir := t.TempDir()
	paths := mergetest.ThreeHosts().Write(t, dir)
	text := filepath.Join(dir, "notes.txt")
	os.WriteFile(text, []byte("not a recording\n"), 0o644)
	if _, err := Scan([]string{paths[0], text}, Options{}); !errors.Is(err, recording.ErrFormat) ||
		!strings.Contains(err.Error(), text) || !strings.Contains(err.Error(), "cudatap record") {
		t.Errorf("text file: %v", err)
	}
	b, _ := os.ReadFile(paths[1])
	head := filepath.Join(dir, "head.cudatap")
	os.WriteFile(head, b[:20], 0o644)
	if _, err := Scan([]string{paths[0], head}, Options{}); !errors.Is(err, recording.ErrTruncated) || !strings.Contains(err.Error(), "header") {
		t.Errorf("cut in the header: %v", err)
	}
	cut := filepath.Join(dir, "cut.cudatap")
	os.WriteFile(cut, b[:len(b)*6/10], 0o644)
	p, err := Scan([]string{paths[0], cut, paths[2]}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if tr := p.Inputs[1].Truncated; !strings.Contains(tr, "truncated") || !strings.Contains(tr, "records read") {
		t.Errorf("truncated: %q", tr)
	}
	if p.Align[1].Method != MethodHost {
		t.Errorf("the cut recording's meetings still align it: %+v", p.Align[1])
	}
	res, _, st := mergeTrace(t, p, nil)
	if !strings.Contains(res.Truncated, cut) {
		t.Errorf("result truncated %q", res.Truncated)
	}
	if cs := st.Comms(); len(cs) != 1 || cs[0].Straggler() != 1 || cs[0].Pending == 0 || cs[0].Incomplete != 0 {
		t.Errorf("communicators %+v", cs)
	}
	var rep strings.Builder
	p.Report(&rep)
	if !strings.Contains(rep.String(), "truncated: ") || !strings.Contains(rep.String(), "merged up to the cut") {
		t.Errorf("plan report:\n%s", rep.String())
	}
}

// TestMergedRecording: the merged recording replays like the merge itself
// and carries the merge info in its header.
func TestMergedRecording(t *testing.T) {
	job := mergetest.ThreeHosts()
	p, err := Scan(job.Write(t, t.TempDir()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var rec bytes.Buffer
	res, _, st := mergeTrace(t, p, &rec)
	st2 := straggler.NewCollector()
	res2, rp, err := replay.Load(bytes.NewReader(rec.Bytes()), func(*replay.Replay) model.Sink { return st2 }, nil)
	if err != nil {
		t.Fatal(err)
	}
	info, err := ReadInfo(rp.Header)
	if err != nil || info == nil || len(info.Inputs) != 3 || info.Inputs[1].Host != "nodeB" || rp.Header.Host != "nodeA,nodeB,nodeC" {
		t.Fatalf("header %+v: %v", rp.Header, err)
	}
	if res2.WallOffsetNs != res.WallOffsetNs || len(res2.Processes) != 3 || len(res2.Counters) != 3 || res2.Drops != res.Drops {
		t.Errorf("merged recording: wall offset %d vs %d, %d processes, %d counters", res2.WallOffsetNs, res.WallOffsetNs, len(res2.Processes), len(res2.Counters))
	}
	c1, c2 := st.Comms(), st2.Comms()
	if len(c2) != 1 || c2[0].Straggler() != 1 || c2[0].Stats[1].CausedNs != c1[0].Stats[1].CausedNs {
		t.Errorf("stragglers differ: %+v vs %+v", c2, c1)
	}
}

// TestMergeLongRun: more meetings than the stragglers' collector keeps
// waiting (maxPending, 4096): replayed interleaved by time, none is given
// up (one host after the other, all but 4096 would be).
func TestMergeLongRun(t *testing.T) {
	job := mergetest.ThreeHosts()
	job.Hosts = job.Hosts[:2]
	job.Meetings = 5000
	p, err := Scan(job.Write(t, t.TempDir()), Options{Keep: 64})
	if err != nil {
		t.Fatal(err)
	}
	checkAligned(t, p, job, MethodHost, 2*ms)
	_, _, st := mergeTrace(t, p, nil)
	if cs := st.Comms(); len(cs) != 1 || cs[0].Meetings != 5000 || cs[0].Incomplete != 0 || cs[0].Pending != 0 {
		t.Errorf("communicators %+v", cs)
	}
}

// TestMergeSameBoot: two ranks recorded apart on one host (one boot id),
// rank 1 30 ms late at every meeting: on their shared clock, not shifted
// (the meetings alone would allow anything within the 30 ms, and the wall
// clocks read at each start differ by a slew), so rank 1 arrives 30 ms
// after rank 0 on the timeline and is the straggler; rank 0's waits are
// no more than it was recorded.
func TestMergeSameBoot(t *testing.T) {
	job := mergetest.OneHost(30*ms, 3*ms)
	paths := job.Write(t, t.TempDir())
	p, err := Scan(paths, Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := p.Align[1]
	if a.Method != MethodSameBoot || a.Theta != 0 || a.Uncertainty != 0 || a.Lo != 0 || a.Hi != 0 || a.Via != 0 || a.Wall != 3*ms {
		t.Fatalf("same boot: %+v", a)
	}
	var rep strings.Builder
	p.Report(&rep)
	if !strings.Contains(rep.String(), "rank 1): not shifted: recorded in the same boot of the same host as "+paths[0]+" (boot id boot-1)") {
		t.Errorf("plan report:\n%s", rep.String())
	}
	in := p.Info().Inputs[1]
	if in.OffsetNs != p.Base || in.Method != MethodSameBoot || *in.UncertaintyNs != 0 || in.BootID != "boot-1" {
		t.Errorf("info %+v", in)
	}
	_, tr, st := mergeTrace(t, p, nil)
	var r0, r1 []float64
	for _, e := range tr.TraceEvents {
		if e.Ph == "X" && e.Name == "ncclAllReduce" {
			switch e.PID {
			case 100:
				r0 = append(r0, e.TS)
			case 101:
				r1 = append(r1, e.TS)
			}
		}
	}
	for k := range r0 {
		if d := (r1[k] - r0[k]) * 1000; int64(d+0.5) != 30*ms {
			t.Errorf("meeting %d: rank 1 %v after rank 0, want 30 ms", k, time.Duration(d))
		}
	}
	cs := st.Comms()
	if len(cs) != 1 || cs[0].Straggler() != 1 || cs[0].Stats[1].Last != 10 {
		t.Fatalf("communicators %+v", cs)
	}
	// Rank 0 syncs 50 µs after each all-reduce, until rank 1 comes.
	if r0 := cs[0].Stats[0]; r0.WaitedNs != uint64(10*(30*ms-50_000)) || r0.WaitedNs > r0.RecordedNs || cs[0].Stats[1].CausedNs != r0.WaitedNs {
		t.Errorf("rank 0 waited %v of %v recorded; rank 1 caused %v", time.Duration(r0.WaitedNs), time.Duration(r0.RecordedNs),
			time.Duration(cs[0].Stats[1].CausedNs))
	}
}

// TestMergeSameHostNoBootID: the same recordings without boot ids (made
// before headers had one), the wall clocks right: of what the meetings
// allow, the wall clocks' offset, 0.
func TestMergeSameHostNoBootID(t *testing.T) {
	job := mergetest.OneHost(30*ms, 0)
	for i := range job.Hosts {
		job.Hosts[i].BootID = ""
	}
	p, err := Scan(job.Write(t, t.TempDir()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a := p.Align[1]; a.Method != MethodHost || a.Theta != 0 || a.Lo > 0 || a.Hi < 0 || a.Hi-a.Lo < 30*ms {
		t.Errorf("no boot id: %+v", a)
	}
	if _, _, st := mergeTrace(t, p, nil); st.Comms()[0].Straggler() != 1 {
		t.Errorf("communicators %+v", st.Comms())
	}
}

// TestMergeBootGroups: two hosts, two ranks recorded apart on each. Each
// host's second recording is on its first's clock; host B's two are
// placed by the meetings of all four ranks, shifted alike.
func TestMergeBootGroups(t *testing.T) {
	job := mergetest.ThreeHosts()
	a, b := job.Hosts[0], job.Hosts[1]
	a2, b2 := a, b
	a2.Rank, a2.PID, a2.WallErr = 2, 200, 2*ms
	b2.Rank, b2.PID, b2.WallErr = 3, 300, b.WallErr+ms
	job.Hosts = []mergetest.Host{a, b, a2, b2}
	paths := job.Write(t, t.TempDir())
	p, err := Scan(paths, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkAligned(t, p, job, "", 2*ms)
	if al := p.Align[2]; al.Method != MethodSameBoot || al.Theta != 0 {
		t.Errorf("host A's second recording: %+v", al)
	}
	if b, b2 := p.Align[1], p.Align[3]; b.Method != MethodHost || b2.Theta != b.Theta || b2.Clock != 1 || !strings.Contains(b2.Note, "on the clock of "+paths[1]) {
		t.Errorf("host B's recordings: %+v and %+v", b, b2)
	}
	if in := p.Info().Inputs[3]; in.SharesClockWith != paths[1] || in.OffsetMinNs == nil || in.OffsetMaxNs == nil {
		t.Errorf("info %+v", in)
	}
	if _, _, st := mergeTrace(t, p, nil); st.Comms()[0].Straggler() != 1 {
		t.Errorf("communicators %+v", st.Comms())
	}
}

// TestMergeSameBootMisnumbered: a recording of the same boot whose
// meetings are numbered three behind (it began after the job's first
// three collectives) stays on the shared clock, and the plan says its
// meetings contradict that.
func TestMergeSameBootMisnumbered(t *testing.T) {
	job := mergetest.OneHost(30*ms, 0)
	job.Meetings = 20
	job.Hosts[1].SkipFirst = 3
	p, err := Scan(job.Write(t, t.TempDir()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if a := p.Align[1]; a.Theta != 0 || a.Method != MethodSameBoot || !strings.Contains(a.Note, "share one clock") || !strings.Contains(a.Note, "misnumbered") {
		t.Errorf("misnumbered, same boot: %+v", a)
	}
}

// TestMergeOneSided: host B never synchronizes after its collectives, so
// the meetings bound its offset from one side only (nobody can have
// finished before B arrived). Wall clocks within that bound are kept;
// wall clocks past it are moved to it; either way the uncertainty is
// unknown and the plan says why.
func TestMergeOneSided(t *testing.T) {
	for _, wallErr := range []int64{-25 * ms, 25 * ms} {
		job := mergetest.ThreeHosts()
		job.Hosts = job.Hosts[:2]
		job.Hosts[1].NoSync, job.Hosts[1].WallErr = true, wallErr
		p, err := Scan(job.Write(t, t.TempDir()), Options{})
		if err != nil {
			t.Fatal(err)
		}
		a, truth := p.Align[1], job.Hosts[1].Theta()
		if a.Uncertainty != -1 || !a.NoLo || a.NoHi || a.Hi < truth || a.Hi > truth+ms || !strings.Contains(a.Note, "from one side only") {
			t.Fatalf("wall clock %v off: %+v (truth %v)", time.Duration(wallErr), a, time.Duration(truth))
		}
		switch {
		case wallErr < 0 && (a.Theta != a.Wall || a.Method != MethodWall):
			t.Errorf("wall clock %v off, within the bound: %+v", time.Duration(wallErr), a)
		case wallErr > 0 && (a.Theta != a.Hi || a.Method != MethodHost):
			t.Errorf("wall clock %v off, past the bound: %+v", time.Duration(wallErr), a)
		}
		if in := p.Info().Inputs[1]; in.OffsetMinNs != nil || in.OffsetMaxNs == nil || in.UncertaintyNs != nil {
			t.Errorf("info %+v", in)
		}
	}
}

// TestScanManyProcesses: past the model's bound the processes of a
// recording share one that is no process of it: the plan neither lists
// nor renumbers it.
func TestScanManyProcesses(t *testing.T) {
	var buf bytes.Buffer
	w, _ := recording.NewWriter(&buf, recording.NewHeader("test", 0))
	for i := range 1030 {
		e := event.Event{Cookie: event.Lookup(event.CudaLaunchKernel).Cookie(0), PID: uint32(1000 + i), TID: uint32(1000 + i), Start: uint64(1e9 + i*1000)}
		w.Event(event.Encode(nil, &e))
	}
	w.Close()
	dir := t.TempDir()
	var paths []string
	for _, name := range []string{"a.cudatap", "b.cudatap"} {
		paths = append(paths, filepath.Join(dir, name))
		os.WriteFile(paths[len(paths)-1], buf.Bytes(), 0o644)
	}
	p, err := Scan(paths, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, in := range p.Inputs {
		if len(in.Procs) != 1024 || slices.ContainsFunc(in.Procs, func(pr Proc) bool { return pr.PID == model.OtherPID }) {
			t.Errorf("input %d: %d processes listed, pid %d among them: want the 1,024 modeled apart", i, len(in.Procs), model.OtherPID)
		}
	}
	if _, ok := p.PIDs[1][model.OtherPID]; ok {
		t.Errorf("pid %d renumbered: %v", model.OtherPID, p.PIDs[1][model.OtherPID])
	}
}
