package agent

import (
	"compress/gzip"
	"context"
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

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/cudatap/cudatap/export"
	"github.com/cudatap/cudatap/internal/procfs"
	"github.com/cudatap/cudatap/internal/units"
	"github.com/cudatap/cudatap/tracer"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/probe"
	"github.com/cudatap/cudatap/tracer/recording"
	"github.com/cudatap/cudatap/tracer/replay"
)

// Bounds of an on-demand capture.
const (
	captureDefault = 10 * time.Second
	captureMax     = 60 * time.Second
	// captureAnswerTimeout: how long a client may take to read a trace.
	captureAnswerTimeout = 5 * time.Minute
)

// capturer serves POST /capture?pid=N&duration=D: it traces process N for
// D (default 10s, at most 60s) with a session of its own, beside the
// agent's, and answers with the Chrome trace of that window. One capture
// at a time; nothing in the request names a file on the node.
//
// Bounded: the session records into a file without a name (nothing is
// left behind, whatever ends the agent) and stops when the recording
// reaches maxBytes (a busy process fills gigabytes in a minute); the
// trace is then made from what was recorded, says it was truncated, and
// streams to the client.
type capturer struct {
	mu       sync.Mutex
	gpuTimes bool
	maxBytes int64
	version  string             // of the build, in the trace
	busy     prometheus.Counter // requests refused while a capture ran
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
		c.busy.Inc()
		http.Error(w, "a capture is already running: try again when it ends", http.StatusConflict)
		return
	}
	defer c.mu.Unlock()
	rec, err := unnamedFile(os.TempDir())
	if err != nil {
		http.Error(w, fmt.Sprintf("capture: cannot make its recording in %s: %v (TMPDIR chooses the directory)", os.TempDir(), err), http.StatusInternalServerError)
		return
	}
	defer rec.Close()
	res, size, err := c.record(r.Context(), pid, d, rec)
	if errors.Is(err, probe.ErrNoCUDA) {
		http.Error(w, err.Error(), http.StatusUnprocessableEntity)
		return
	}
	if err != nil {
		http.Error(w, "capture failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	if _, err := rec.Seek(0, io.SeekStart); err != nil {
		http.Error(w, "capture: reading its recording back: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="cudatap-%d.json"`, pid))
	h.Set("X-Cudatap-Recording-Bytes", strconv.FormatInt(size, 10))
	if res.Truncated != "" {
		h.Set("X-Cudatap-Truncated", res.Truncated)
	}
	h.Set("Vary", "Accept-Encoding")
	body := io.Writer(w)
	if acceptsGzip(r) {
		h.Set("Content-Encoding", "gzip")
		zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
		defer zw.Close()
		body = zw
	}
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(captureAnswerTimeout))
	if err := writeCaptureTrace(body, rec, res, c.version); err != nil {
		// The status is sent: the client sees a trace cut short.
		c.log.Warn("capture: the trace was not sent whole", "pid", pid, "err", err)
	}
}

// errCaptureFull stops a capture's recording at --capture-max-bytes.
var errCaptureFull = errors.New("the capture's recording is full")

// record traces pid for d into rec, stopping early when rec reaches
// maxBytes: the session's result (Truncated says where it stopped early)
// and the bytes recorded.
func (c *capturer) record(ctx context.Context, pid int, d time.Duration, rec io.Writer) (*model.Result, int64, error) {
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	capped := &cappedWriter{w: rec, max: c.maxBytes, full: stop, start: time.Now()}
	out, err := tracer.Run(ctx, tracer.Config{PIDs: []int{pid}, Duration: d, Stacks: probe.StacksSync,
		NVMLInterval: -1, GPUTimes: c.gpuTimes, Recording: capped, Logger: c.log})
	if capped.err != nil && errors.Is(err, errCaptureFull) {
		err = nil // the recording ends at the cap, as it should
	}
	if err != nil {
		return nil, 0, err
	}
	if out == nil || out.Result == nil {
		return nil, 0, errors.New("the session ended without a result")
	}
	if capped.err != nil && out.Result.Truncated == "" {
		out.Result.Truncated = fmt.Sprintf("the capture stopped after %v of the %v asked: its recording reached the agent's --capture-max-bytes (%s); calls after that are not in the trace",
			capped.after.Round(time.Millisecond), d, units.Bytes(uint64(c.maxBytes)))
	}
	return out.Result, capped.n, nil
}

// writeCaptureTrace replays the recording rec into a Chrome trace written
// to w; names come from the session's result res.
func writeCaptureTrace(w io.Writer, rec io.Reader, res *model.Result, version string) error {
	set, err := export.CreateChrome([]export.Output{{Path: export.Stdout, Format: export.Chrome, W: w}}, res.Names, export.Options{Version: version})
	if err != nil {
		return err
	}
	m := model.New(set.Sink())
	_, err = replay.ReadEvents(rec, m, nil)
	m.Finish()
	if err != nil && !(res.Truncated != "" && errors.Is(err, recording.ErrTruncated)) {
		set.Abort()
		return err
	}
	return set.Close(res)
}

// cappedWriter writes to w until a write would take it past max bytes;
// from then on it refuses every write (errCaptureFull), and calls full
// once.
type cappedWriter struct {
	w     io.Writer
	max   int64
	full  func()
	start time.Time

	n     int64         // bytes written
	err   error         // errCaptureFull once full
	after time.Duration // since start, when it filled
}

func (c *cappedWriter) Write(p []byte) (int, error) {
	if c.err == nil && c.n+int64(len(p)) > c.max {
		c.err, c.after = errCaptureFull, time.Since(c.start)
		c.full()
	}
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// unnamedFile opens a file without a name in dir (O_TMPFILE): it is gone
// with its descriptor, whatever ends the agent (a kill -9 left empty
// /tmp/cudatap-capture-* directories behind). A file system without
// O_TMPFILE gets a named file, removed as soon as it is open.
func unnamedFile(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err == nil {
		return os.NewFile(uintptr(fd), filepath.Join(dir, "(capture recording)")), nil
	}
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EISDIR) {
		return nil, err
	}
	f, err := os.CreateTemp(dir, ".cudatap-capture-*")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name())
	return f, nil
}
