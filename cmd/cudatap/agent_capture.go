package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/cudatap/cudatap/export"
	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/tracer"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/probe"
	"github.com/cudatap/cudatap/tracer/recording"
)

// Bounds of an on-demand capture.
const (
	captureDefault = 10 * time.Second
	captureMax     = 60 * time.Second
)

// capturer serves POST /capture?pid=N&duration=D: it traces process N for
// D (default 10s, at most 60s) with a session of its own, beside the
// agent's, and answers with the Chrome trace of that window. One capture
// at a time; nothing in the request names a file on the node.
type capturer struct {
	mu       sync.Mutex
	gpuTimes bool
	log      *slog.Logger
}

func (c *capturer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "POST /capture?pid=N&duration=D", http.StatusMethodNotAllowed)
		return
	}
	q := r.URL.Query()
	pid, err := strconv.Atoi(q.Get("pid"))
	if err != nil || pid <= 0 {
		http.Error(w, "pid: want the id of a running CUDA process", http.StatusBadRequest)
		return
	}
	d := captureDefault
	if s := q.Get("duration"); s != "" {
		if d, err = time.ParseDuration(s); err != nil || d <= 0 || d > captureMax {
			http.Error(w, fmt.Sprintf("duration: want a Go duration up to %v, e.g. 10s", captureMax), http.StatusBadRequest)
			return
		}
	}
	if !procfs.Alive(pid) {
		http.Error(w, fmt.Sprintf("process %d does not exist", pid), http.StatusNotFound)
		return
	}
	if !c.mu.TryLock() {
		http.Error(w, "a capture is already running: try again when it ends", http.StatusConflict)
		return
	}
	defer c.mu.Unlock()
	dir, err := os.MkdirTemp("", "cudatap-capture-")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer os.RemoveAll(dir)
	path, err := c.capture(r, pid, d, dir)
	if errors.Is(err, probe.ErrNoCUDA) {
		http.Error(w, err.Error(), http.StatusUnprocessableEntity)
		return
	}
	if err != nil {
		http.Error(w, "capture failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	f, err := os.Open(path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="cudatap-%d.json"`, pid))
	io.Copy(w, f)
}

// capture records pid for d into dir and writes the Chrome trace there.
func (c *capturer) capture(r *http.Request, pid int, d time.Duration, dir string) (string, error) {
	rec, err := os.Create(filepath.Join(dir, "capture.cudatap"))
	if err != nil {
		return "", err
	}
	defer rec.Close()
	out, err := tracer.Run(r.Context(), tracer.Config{PIDs: []int{pid}, Duration: d, Stacks: probe.StacksSync,
		NVMLInterval: -1, GPUTimes: c.gpuTimes, Recording: rec, Logger: c.log})
	if err != nil {
		return "", err
	}
	if out == nil || out.Result == nil {
		return "", errors.New("the session ended without a result")
	}
	trace := filepath.Join(dir, "trace.json")
	outs, err := export.Plan([]string{trace}, "")
	if err != nil {
		return "", err
	}
	set, err := export.CreateChrome(outs, out.Result.Names, export.Options{Version: version})
	if err != nil {
		return "", err
	}
	if _, err := rec.Seek(0, io.SeekStart); err != nil {
		set.Abort()
		return "", err
	}
	m := model.New(set.Sink())
	if _, err := recording.ReadEvents(rec, m, nil); err != nil {
		set.Abort()
		return "", err
	}
	m.Finish()
	return trace, set.Close(out.Result)
}
