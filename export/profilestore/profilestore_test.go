package profilestore

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/cudatap/cudatap/tracer/model"
)

// window is a profile of two processes, as the agent's window makes one.
func window() (*profile.Profile, []*model.Process) {
	st := []*profile.ValueType{{Type: "cuda_api", Unit: "count"}}
	fn := &profile.Function{ID: 1, Name: "cudaLaunchKernel"}
	loc := &profile.Location{ID: 1, Line: []profile.Line{{Function: fn}}}
	p := &profile.Profile{SampleType: st, Function: []*profile.Function{fn}, Location: []*profile.Location{loc}}
	for _, pid := range []string{"11", "22", "22"} {
		p.Sample = append(p.Sample, &profile.Sample{Location: []*profile.Location{loc}, Value: []int64{5}, Label: map[string][]string{"pid": {pid}}})
	}
	procs := []*model.Process{
		{PID: 11, Info: model.ProcessInfo{Comm: "python3", Container: "3f2a9c1b", PodUID: "pod-uid-1"}},
		{PID: 22, Info: model.ProcessInfo{Comm: "train, v2"}},
		{PID: 33, Info: model.ProcessInfo{Comm: "idle"}}, // no samples: no profile
	}
	return p, procs
}

func TestPerProcess(t *testing.T) {
	p, procs := window()
	per := PerProcess(p, procs, nil)
	if len(per) != 2 {
		t.Fatalf("%d profiles, want 2 (one per process with samples)", len(per))
	}
	l := LabelsOf(procs[0])
	got := per[l]
	if got == nil || len(got.Sample) != 1 || got.Sample[0].Label["container"][0] != "3f2a9c1b" || got.Sample[0].Label["pod"][0] != "pod-uid-1" {
		t.Errorf("process 11: %v", got)
	}
	if n := len(per[LabelsOf(procs[1])].Sample); n != 2 {
		t.Errorf("process 22: %d samples, want 2", n)
	}
}

// TestDirBounded: the directory never holds more than its bound (the
// newest profile always kept), and every file parses.
func TestDirBounded(t *testing.T) {
	dir := t.TempDir()
	p, procs := window()
	per := PerProcess(p, procs, nil)
	one := per[LabelsOf(procs[0])]
	path, err := (&Dir{path: dir, maxBytes: 1 << 30}).Write(LabelsOf(procs[0]), time.Unix(100, 0), one)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := os.Stat(path)
	d, err := OpenDir(dir, 3*info.Size())
	if err != nil {
		t.Fatal(err)
	}
	var last string
	for i := range 10 {
		if last, err = d.Write(LabelsOf(procs[0]), time.Unix(int64(200+i), 0), one); err != nil {
			t.Fatal(err)
		}
	}
	ents, _ := os.ReadDir(dir)
	var total int64
	for _, e := range ents {
		fi, _ := e.Info()
		total += fi.Size()
		f, _ := os.Open(filepath.Join(dir, e.Name()))
		if _, err := profile.Parse(f); err != nil {
			t.Errorf("%s: %v", e.Name(), err)
		}
		f.Close()
	}
	if total > 3*info.Size() || len(ents) != 3 {
		t.Errorf("%d files, %d bytes: want 3 files within %d bytes", len(ents), total, 3*info.Size())
	}
	if _, err := os.Stat(last); err != nil || !strings.HasSuffix(last, "-11-python3.pb.gz") {
		t.Errorf("newest %s: %v", last, err)
	}
}

// receiver implements Pyroscope's ingest API as documented, failing the
// first fail requests with 503.
type receiver struct {
	mu       sync.Mutex
	fail     int
	calls    int
	profiles map[string]*profile.Profile // by application name
	query    url.Values
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if req.Method != http.MethodPost || req.URL.Path != "/ingest" {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	if r.fail > 0 {
		r.fail--
		http.Error(w, "busy", http.StatusServiceUnavailable)
		return
	}
	q := req.URL.Query()
	if q.Get("format") != "pprof" || q.Get("name") == "" || q.Get("from") == "" || q.Get("until") == "" {
		http.Error(w, "bad query", http.StatusBadRequest)
		return
	}
	f, _, err := req.FormFile("profile")
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	data, _ := io.ReadAll(f)
	p, err := profile.ParseData(data)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.profiles[q.Get("name")] = p
	r.query = q
}

func TestPush(t *testing.T) {
	rcv := &receiver{fail: 1, profiles: map[string]*profile.Profile{}}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	ps, err := NewPusher(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ps.backoff = []time.Duration{time.Millisecond, time.Millisecond}
	p, procs := window()
	per := PerProcess(p, procs, nil)
	for l, prof := range per {
		if err := ps.Push(context.Background(), l, time.Unix(100, 0), time.Unix(110, 0), prof); err != nil {
			t.Fatal(err)
		}
	}
	if ps.Pushed.Load() != 2 || ps.Dropped.Load() != 0 || rcv.calls != 3 {
		t.Errorf("pushed %d dropped %d in %d requests: want 2, 0 in 3 (one retried)", ps.Pushed.Load(), ps.Dropped.Load(), rcv.calls)
	}
	// No pid by default, in the name or on the samples: one series per
	// comm, container, pod and namespace, as the metrics.
	name := "cudatap.cuda{comm=python3,container=3f2a9c1b,pod=pod-uid-1,service_name=python3}"
	if got := rcv.profiles[name]; got == nil || len(got.Sample) != 1 || got.Sample[0].Label["pid"] != nil || got.Sample[0].Label["comm"][0] != "python3" {
		t.Errorf("profile under %s: %v (have %d)", name, got, len(rcv.profiles))
	}
	if _, ok := rcv.profiles["cudatap.cuda{comm=train__v2,service_name=train__v2}"]; !ok {
		t.Errorf("label values are not escaped: %v", rcv.profiles)
	}
	for l, prof := range per {
		if prof.Sample[0].Label["pid"] == nil {
			t.Errorf("pushing took the pid off %v's profile (--profiles-dir writes it too)", l)
		}
	}

	// --pid-label: the pid in both.
	ps.PIDLabel = true
	for l, prof := range PerProcess(p, procs, nil) {
		if err := ps.Push(context.Background(), l, time.Unix(100, 0), time.Unix(110, 0), prof); err != nil {
			t.Fatal(err)
		}
	}
	name = "cudatap.cuda{pid=11,comm=python3,container=3f2a9c1b,pod=pod-uid-1,service_name=python3}"
	if got := rcv.profiles[name]; got == nil || len(got.Sample) != 1 || got.Sample[0].Label["pid"][0] != "11" {
		t.Errorf("with the pid label, profile under %s: %v (have %v)", name, got, rcv.profiles)
	}
}

// TestPushDown: a server that stays down costs a bounded number of tries,
// and the profile is counted as dropped; a refused profile is not retried.
func TestPushDown(t *testing.T) {
	rcv := &receiver{fail: 1 << 30, profiles: map[string]*profile.Profile{}}
	srv := httptest.NewServer(rcv)
	ps, _ := NewPusher(srv.URL)
	ps.backoff = []time.Duration{time.Millisecond, time.Millisecond}
	p, procs := window()
	per := PerProcess(p, procs, nil)
	l := LabelsOf(procs[0])
	if err := ps.Push(context.Background(), l, time.Unix(1, 0), time.Unix(2, 0), per[l]); err == nil {
		t.Error("push to a server that is down succeeded")
	}
	if rcv.calls != 3 || ps.Dropped.Load() != 1 {
		t.Errorf("%d requests, %d dropped: want 3 and 1", rcv.calls, ps.Dropped.Load())
	}
	srv.Close() // now not even listening
	if err := ps.Push(context.Background(), l, time.Unix(1, 0), time.Unix(2, 0), per[l]); err == nil || ps.Dropped.Load() != 2 {
		t.Errorf("push to a closed port: %v, dropped %d", err, ps.Dropped.Load())
	}
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", http.StatusBadRequest) }))
	defer bad.Close()
	ps2, _ := NewPusher(bad.URL)
	ps2.backoff = []time.Duration{time.Hour} // a retry would hang the test
	if err := ps2.Push(context.Background(), l, time.Unix(1, 0), time.Unix(2, 0), per[l]); err == nil || ps2.Dropped.Load() != 1 {
		t.Errorf("refused profile: %v, dropped %d", err, ps2.Dropped.Load())
	}
	if _, err := NewPusher("file:///etc/passwd"); err == nil {
		t.Error("a file URL was accepted")
	}
}
