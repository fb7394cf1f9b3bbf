package flight

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	htmlreport "github.com/cudatap/cudatap/export/html"
	"github.com/cudatap/cudatap/internal/sim"
	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/guard"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/probe"
	"github.com/cudatap/cudatap/tracer/recording"
	"github.com/cudatap/cudatap/tracer/replay"
	"github.com/cudatap/cudatap/tracer/targets"
)

func TestMain(m *testing.M) {
	guard.Init() // the test binary is its sessions' guardian and launcher too
	testutil.Main(m)
}

// newRecorder is a recorder into a fresh directory, the options o with
// the window the tests' runs fit in.
func newRecorder(t testing.TB, o Options) *Recorder {
	t.Helper()
	if o.Window == 0 {
		o.Window = time.Hour
	}
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	r, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// traced is a simulated workload run under the flight recorder (and a
// whole recording of the same session, beside it).
type traced struct {
	out   *tracer.Outcome
	rep   *sim.Report
	whole string // the whole recording
}

// runUnder launches the workload (exe and args) traced into r and waits
// for it to end; r is closed (its dumps written) on return.
func runUnder(t *testing.T, r *Recorder, whole string, exe string, args ...string) *traced {
	t.Helper()
	var stdout bytes.Buffer
	out, err := tracer.Run(context.Background(), tracer.Config{Command: append([]string{exe}, args...), Stacks: probe.StacksSync,
		NVMLInterval: -1, NameWindow: -1, Recording: r, Sink: r, Stdout: &stdout})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	tr := &traced{out: out, whole: whole}
	if rep, err := sim.ParseReport(stdout.Bytes()); err == nil {
		tr.rep = rep
	}
	return tr
}

// dumps lists the dumps in dir, oldest first, read back.
type readDump struct {
	path   string
	flight *recording.Flight
	res    *model.Result
	rep    *htmlreport.Report
}

func dumps(t *testing.T, r *Recorder) []readDump {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(r.o.Dir, prefix+"*.cudatap"))
	slices.Sort(paths)
	var out []readDump
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		res, rp, err := replay.Load(f, nil, nil)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		f.Seek(0, 0)
		rep, err := htmlreport.Load(f, htmlreport.Options{}, nil)
		f.Close()
		if err != nil {
			t.Fatalf("%s: report: %v", p, err)
		}
		if _, err := os.Stat(strings.TrimSuffix(p, ".cudatap") + ".html"); err != nil && !r.o.NoReport {
			t.Errorf("%s has no HTML report beside it: %v", p, err)
		}
		out = append(out, readDump{path: p, flight: rp.Header.Flight, res: res, rep: rep})
	}
	return out
}

// counts are a result's calls of pid by exact symbol.
func counts(res *model.Result, pid int) map[string]int {
	got := map[string]int{}
	for _, p := range res.Processes {
		if int(p.PID) == pid {
			for sym, n := range p.CallCounts() {
				got[sym] += int(n)
			}
		}
	}
	return got
}

// checkWholeRun checks that a dump whose window held all of the
// workload's run holds each of its calls, as the workload counted them:
// every launch once (whichever layer saw it), every other call cudatap
// hooks in the layers it found.
func checkWholeRun(t *testing.T, d readDump, tr *traced) {
	t.Helper()
	pid := tr.rep.PID
	got := counts(d.res, pid)
	var layers uint8
	for _, a := range tr.out.Attached {
		if a.PID == pid {
			for _, l := range a.Libraries {
				layers |= 1 << l.Layer
			}
		}
	}
	launches := func(calls map[string]int) (n int) {
		for sym, k := range calls {
			if s := specOf(sym); s != nil && s.Class == event.ClassLaunch {
				n += k
			}
		}
		return n
	}
	if g, w := launches(got), launches(tr.rep.Calls); g != w {
		t.Errorf("%s: %d launches, the workload made %d", filepath.Base(d.path), g, w)
	}
	want := map[string]int{}
	for _, calls := range []map[string]int{tr.rep.Calls, tr.rep.Internal} {
		for sym, n := range calls {
			if s := specOf(sym); s != nil && s.Class != event.ClassLaunch && targets.PolicyFor(s.Layer, layers).Want(s) {
				want[sym] += n
			}
		}
	}
	for sym, n := range want {
		if got[sym] != n {
			t.Errorf("%s: %d %s, the workload made %d", filepath.Base(d.path), got[sym], sym, n)
		}
	}
}

// specOf finds the API spec of an exact symbol, nil if not hooked at all.
func specOf(sym string) *event.Spec {
	for _, l := range event.Layers {
		for _, s := range event.Specs(l) {
			if slices.Contains(s.Symbols, sym) {
				return s
			}
		}
	}
	return nil
}

// liveRun is a simulated workload launched under the recorder that the
// test talks to while it runs: its stdin, its stdout's lines.
type liveRun struct {
	t     *testing.T
	r     *Recorder
	in    *io.PipeWriter
	lines chan string
	all   bytes.Buffer // stdout, once the run ended
	done  chan struct{}
	out   *tracer.Outcome
	err   error
}

func startUnder(t *testing.T, r *Recorder, exe string, args ...string) *liveRun {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	l := &liveRun{t: t, r: r, in: inW, lines: make(chan string, 64), done: make(chan struct{})}
	go func() {
		s := bufio.NewScanner(outR)
		for s.Scan() {
			l.all.WriteString(s.Text() + "\n")
			select {
			case l.lines <- s.Text():
			default:
			}
		}
		close(l.lines)
	}()
	go func() {
		defer close(l.done)
		l.out, l.err = tracer.Run(context.Background(), tracer.Config{Command: append([]string{exe}, args...), Stacks: probe.StacksSync,
			NVMLInterval: -1, NameWindow: -1, Recording: r, Sink: r, Stdin: inR, Stdout: outW})
		outW.Close()
	}()
	t.Cleanup(func() { inW.Close(); <-l.done })
	return l
}

// wait waits for a line of stdout that begins with prefix.
func (l *liveRun) wait(prefix string) string {
	l.t.Helper()
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case s, ok := <-l.lines:
			if !ok {
				l.t.Fatalf("the workload ended before %q", prefix)
			}
			if strings.HasPrefix(s, prefix) {
				return s
			}
		case <-timeout:
			l.t.Fatalf("no %q from the workload within 2 minutes", prefix)
		}
	}
}

// end waits for the session to end and closes the recorder (its dumps
// written); the workload's report, if it printed one.
func (l *liveRun) end() *traced {
	l.t.Helper()
	l.in.Close() // the session waits for its copy to the command's stdin
	<-l.done
	for range l.lines {
	}
	if l.err != nil {
		l.t.Fatal(l.err)
	}
	l.r.Close()
	tr := &traced{out: l.out}
	if rep, err := sim.ParseReport(l.all.Bytes()); err == nil {
		tr.rep = rep
	}
	return tr
}

// eventually waits for cond (checked every 10 ms), failing after 2 minutes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 2 minutes", what)
		}
	}
}
