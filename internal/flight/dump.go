package flight

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	htmlreport "github.com/cudatap/cudatap/export/html"
	"github.com/cudatap/cudatap/internal/units"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/recording"
)

// dump is a trigger's dump, from its firing until it is written.
type dump struct {
	kind, detail string
	pid          uint32
	pids         []uint32
	at, deadline uint64
	// Taken when sealed (seal): what the recording will hold.
	hdr   recording.Header
	procs []procSnap
	// Closed once written (or failed): result or err.
	done   chan struct{}
	result *Result
	err    error
}

// procSnap is what a dump takes of a process: its names, its state (in
// the order read) and its window, as they were when the dump was sealed.
type procSnap struct {
	pid    uint32
	names  [][]byte
	state  []*stateRecord
	window [][]byte
	counts procCounts
}

// Result says where a dump went.
type Result struct {
	Trigger, Detail string
	PIDs            []uint32
	Path            string // the recording
	Report          string // its HTML report ("" when none was made)
	Bytes           int64  // of both
	Events          uint64 // the window's events it holds
	Restated        uint64 // calls from before the windows
	Dropped         uint64 // events of the windows that did not fit the budget
}

// noNVML is what a dump's report says of the GPUs.
const noNVML = "the flight recorder's dumps hold no NVML samples (the agent serves the GPU series at /metrics)"

// prefix names every file the recorder writes: it removes no other.
const prefix = "cudatap-flight-"

// seal takes what d will hold and hands it to the writer. Under r.mu.
func (r *Recorder) seal(d *dump) {
	d.hdr = r.hdr
	for _, pid := range d.pids {
		p := r.procs[pid]
		if p == nil {
			continue
		}
		s := procSnap{pid: pid, names: p.names.spans(), window: p.window.spans(), counts: p.counts}
		for _, st := range p.state {
			s.state = append(s.state, st) // records are never changed, only replaced
		}
		slices.SortFunc(s.state, func(a, b *stateRecord) int { return cmp.Compare(a.seq, b.seq) })
		d.procs = append(d.procs, s)
	}
	select {
	case r.jobs <- d:
		r.chunks.lent++ // until written: its chunks are read
	default:
		r.stats.failures++
		d.err = fmt.Errorf("%d dumps are being written already: this one (%s) was not", cap(r.jobs), d.kind)
		r.log.Error("flight recorder: dump not written", "trigger", d.kind, "err", d.err)
		close(d.done)
	}
}

// writer writes the dumps sealed, one at a time, until Close.
func (r *Recorder) writer() {
	defer r.wg.Done()
	for {
		select {
		case d := <-r.jobs:
			r.writeOut(d)
		case <-r.quit:
			for { // what was sealed before Close
				select {
				case d := <-r.jobs:
					r.writeOut(d)
				default:
					return
				}
			}
		}
	}
}

func (r *Recorder) writeOut(d *dump) {
	defer close(d.done)
	res, err := r.writeDump(d)
	if err == nil {
		err = r.enforceDir(res.Path)
	}
	d.procs = nil // what it took is let go (the caller may keep d)
	r.mu.Lock()
	r.chunks.lent--
	if err != nil {
		r.stats.failures++
	} else {
		r.stats.dumps[d.kind]++
	}
	r.mu.Unlock()
	if err != nil {
		d.err = err
		r.log.Error("flight recorder: dump not written", "trigger", d.kind, "err", err)
		return
	}
	d.result = res
	r.log.Info("flight recorder: dump written", "trigger", d.kind, "path", res.Path, "report", res.Report, "events", res.Events, "dropped", res.Dropped)
	if r.o.OnDump != nil {
		r.o.OnDump(res)
	}
}

// writeDump writes d's recording, then its report.
func (r *Recorder) writeDump(d *dump) (*Result, error) {
	who := "all"
	if d.pid != 0 {
		who = fmt.Sprintf("pid%d", d.pid)
	}
	// Named by when they were written, then in order (two in a
	// millisecond): the order the bound removes them in.
	r.written++
	base := filepath.Join(r.o.Dir, fmt.Sprintf("%s%s-%04d-%s-%s", prefix, time.Now().Format("20060102-150405.000"), r.written%10000, d.kind, who))
	res := &Result{Trigger: d.kind, Detail: d.detail, Path: base + ".cudatap"}
	fl := &recording.Flight{Trigger: d.kind, Detail: d.detail, PID: d.pid, At: d.at, WindowNs: uint64(r.o.Window)}
	for _, s := range d.procs {
		fl.PIDs = append(fl.PIDs, s.pid)
		fl.Events += s.counts.Held
		fl.Dropped += s.counts.Dropped
		fl.StateDropped += s.counts.StateDropped
		fl.Restated += uint64(len(s.state))
	}
	res.PIDs, res.Events, res.Restated, res.Dropped = fl.PIDs, fl.Events, fl.Restated, fl.Dropped
	hdr := d.hdr
	if hdr.Version == 0 {
		hdr = recording.NewHeader("cudatap", 0) // no session began: an empty dump still reads
	}
	hdr.Flight = fl
	err := writeFile(res.Path, func(w io.Writer) error {
		rw, err := recording.NewWriter(w, hdr)
		if err != nil {
			return err
		}
		// Names first, then the state in the order it was made, then the
		// windows in the order they were read.
		for _, s := range d.procs {
			for _, b := range s.names {
				each(b, func(_ uint64, typ byte, _ int32, payload []byte) { rw.Raw(typ, payload) })
			}
		}
		state := make([]*cursor, 0, len(d.procs))
		for _, s := range d.procs {
			var spans [][]byte
			for _, st := range s.state {
				spans = append(spans, frame(st))
			}
			state = append(state, newCursor(spans))
		}
		merge(state, rw)
		windows := make([]*cursor, 0, len(d.procs))
		for _, s := range d.procs {
			windows = append(windows, newCursor(s.window))
		}
		merge(windows, rw)
		rw.GPU(model.GPUReport{Status: noNVML})
		return rw.Close()
	})
	if err != nil {
		return nil, err
	}
	if fi, err := os.Stat(res.Path); err == nil {
		res.Bytes = fi.Size()
	}
	if r.o.NoReport {
		return res, nil
	}
	page := base + ".html"
	if err := r.writeReport(res.Path, page); err != nil {
		r.log.Warn("flight recorder: the dump's report could not be made (the dump is written: cudatap report it)", "path", res.Path, "err", err)
		return res, nil
	}
	res.Report = page
	if fi, err := os.Stat(page); err == nil {
		res.Bytes += fi.Size()
	}
	return res, nil
}

// writeReport replays the dump into its HTML report.
func (r *Recorder) writeReport(path, page string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	rep, err := htmlreport.Load(f, htmlreport.Options{Version: r.o.Version}, nil)
	if err != nil {
		return err
	}
	return writeFile(page, func(w io.Writer) error { return rep.WriteHTML(w, "") })
}

// frame puts a state record in a chunk's layout, for a cursor.
func frame(st *stateRecord) []byte {
	var l log
	l.add(&chunkPool{size: recHeader + len(st.payload)}, st.seq, st.typ, st.payload, 0, -1)
	return l.chunks[0].buf[:l.chunks[0].n]
}

// merge writes the records of several processes in the order they were
// read (by sequence number).
func merge(cs []*cursor, w *recording.Writer) {
	for {
		var next *cursor
		for _, c := range cs {
			if c.ok && (next == nil || c.seq < next.seq) {
				next = c
			}
		}
		if next == nil {
			return
		}
		w.Raw(next.typ, next.payload)
		next.next()
	}
}

// writeFile writes path through a temporary file beside it, renamed when
// complete: a dump is never seen half written.
func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	err = write(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("write %s: %w (check the space left in --dumps-dir)", path, err)
	}
	return nil
}

// enforceDir keeps the dumps in Dir under DirMaxBytes, the oldest removed
// first (a dump's recording and report together). A dump just written
// (fresh) that alone is over the bound is removed too, and that is the
// error.
func (r *Recorder) enforceDir(fresh string) error {
	entries, err := os.ReadDir(r.o.Dir)
	if err != nil {
		return fmt.Errorf("--dumps-dir %s: %w", r.o.Dir, err)
	}
	type group struct {
		base  string
		files []string
		bytes int64
	}
	byBase := map[string]*group{}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) || !e.Type().IsRegular() {
			continue
		}
		base := strings.TrimSuffix(strings.TrimSuffix(name, ".cudatap"), ".html")
		fi, err := e.Info()
		if err != nil {
			continue
		}
		g := byBase[base]
		if g == nil {
			g = &group{base: base}
			byBase[base] = g
		}
		g.files = append(g.files, filepath.Join(r.o.Dir, name))
		g.bytes += fi.Size()
	}
	groups := make([]*group, 0, len(byBase))
	var total int64
	for _, g := range byBase {
		groups = append(groups, g)
		total += g.bytes
	}
	// Names begin with the time they were written.
	slices.SortFunc(groups, func(a, b *group) int { return cmp.Compare(a.base, b.base) })
	freshBase := strings.TrimSuffix(filepath.Base(fresh), ".cudatap")
	var errs []error
	for _, g := range groups {
		if total <= r.o.DirMaxBytes {
			break
		}
		if g.base == freshBase && len(groups) > 1 {
			continue // the others first
		}
		for _, f := range g.files {
			if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
		total -= g.bytes
		r.mu.Lock()
		r.stats.removed++
		r.mu.Unlock()
		if g.base == freshBase {
			return fmt.Errorf("the dump (%s) is larger than --dumps-max-bytes (%s): it was removed; raise --dumps-max-bytes, or lower --flight-max-bytes", units.Bytes(uint64(g.bytes)), units.Bytes(uint64(r.o.DirMaxBytes)))
		}
	}
	if total > r.o.DirMaxBytes && fresh != "" {
		// Only the fresh one is left and it is over the bound.
		for _, g := range groups {
			if g.base == freshBase {
				for _, f := range g.files {
					os.Remove(f)
				}
				return fmt.Errorf("the dump (%s) is larger than --dumps-max-bytes (%s): it was removed; raise --dumps-max-bytes, or lower --flight-max-bytes", units.Bytes(uint64(g.bytes)), units.Bytes(uint64(r.o.DirMaxBytes)))
			}
		}
	}
	return errors.Join(errs...)
}
