// Package export turns a recording into files: Chrome traces
// (export/chrome), Perfetto traces (export/perfetto), pprof profiles
// (export/pprofout), text reports (export/report). This file plans the outputs and writes them safely:
// each to a temporary file next to its target, renamed over it once
// complete, so a failed or interrupted export never leaves half a file
// where a good one was.
package export

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/google/pprof/profile"
	"github.com/klauspost/pgzip"
	"golang.org/x/sys/unix"

	"github.com/cudatap/cudatap/export/chrome"
	"github.com/cudatap/cudatap/export/lint"
	"github.com/cudatap/cudatap/export/perfetto"
	"github.com/cudatap/cudatap/export/pprofout"
	"github.com/cudatap/cudatap/export/steps"
	"github.com/cudatap/cudatap/export/straggler"
	"github.com/cudatap/cudatap/export/syncs"
	"github.com/cudatap/cudatap/tracer/model"
)

// Format of an output file.
type Format string

const (
	Chrome    Format = "chrome"   // .json, .json.gz
	Perfetto  Format = "perfetto" // .perfetto-trace, .pftrace
	Pprof     Format = "pprof"    // .pb.gz
	Recording Format = "cudatap"  // .cudatap
)

// Formats lists the accepted --format values.
var Formats = []Format{Chrome, Perfetto, Pprof, Recording}

// FormatOf picks the format from the path's extension; override (a
// --format) gives it to a path whose extension names none, such as Stdout,
// so that `-o - --format pprof -o run.cudatap` writes both.
func FormatOf(path, override string) (Format, error) {
	var forced Format
	if override != "" {
		for _, f := range Formats {
			if string(f) == override {
				forced = f
			}
		}
		if forced == "" {
			return "", fmt.Errorf("unknown --format %q: use chrome, perfetto, pprof or cudatap", override)
		}
	}
	switch {
	case path == Stdout:
	case strings.HasSuffix(path, ".json"), strings.HasSuffix(path, ".json.gz"):
		return Chrome, nil
	case strings.HasSuffix(path, ".perfetto-trace"), strings.HasSuffix(path, ".pftrace"):
		return Perfetto, nil
	case strings.HasSuffix(path, ".pb.gz"), strings.HasSuffix(path, ".pb"), strings.HasSuffix(path, ".pprof"):
		return Pprof, nil
	case strings.HasSuffix(path, ".cudatap"):
		return Recording, nil
	}
	if forced != "" {
		return forced, nil
	}
	return "", fmt.Errorf("cannot tell the format of %q from its extension: use .json/.json.gz (Chrome trace), .perfetto-trace (Perfetto trace), .pb.gz (pprof) or .cudatap (recording), or pass --format", path)
}

// Output is one requested output file.
type Output struct {
	Path   string
	Format Format
	// W receives an output whose Path is Stdout, as it is written (no
	// temporary file: a pipe cannot be renamed over). The caller sets it:
	// the CLI owns its standard output.
	W io.Writer
}

// Stdout is the output path that names the standard output (`-o -`).
const Stdout = "-"

// Options shared by the exporters.
type Options struct {
	Version  string
	Counters []chrome.Counter
	// A merged trace's (export/merge): where its processes ran, and how
	// its recordings were aligned.
	Origins map[uint32]chrome.Origin
	Merge   []byte
	// Live: the traces are written while a session runs, which is still
	// naming what it traces: each holds the events whose names come late
	// in a file beside it until Close (chrome.Options.Pending).
	Live bool
}

// Plan resolves every path's format and makes sure each can be written,
// before any tracing starts: a typo must not cost a recording. It creates
// and truncates nothing: it checks that each output's directory exists and
// is writable, that an existing output is a regular file, that no path is
// given twice, and that no output is one of the inputs (the recordings
// being read), which writing would destroy. Stdout is planned as it is:
// its format is override's, and the caller gives it its W.
func Plan(paths []string, override string, inputs ...string) ([]Output, error) {
	var outs []Output
	seen := map[string]string{}
	for _, p := range paths {
		if p == Stdout {
			if override == "" {
				return nil, fmt.Errorf("-o - writes to the standard output, which has no extension: pass --format (chrome, perfetto, pprof or cudatap)")
			}
			if _, dup := seen[Stdout]; dup {
				return nil, fmt.Errorf("-o - is given twice: the standard output takes one output")
			}
			seen[Stdout] = p
		}
		f, err := FormatOf(p, override)
		if err != nil {
			return nil, err
		}
		if p == Stdout {
			outs = append(outs, Output{Path: p, Format: f})
			continue
		}
		target, err := checkPath(p, inputs...)
		if err != nil {
			return nil, err
		}
		if prev, dup := seen[target]; dup {
			return nil, fmt.Errorf("outputs %s and %s are the same file: give each output once", prev, p)
		}
		seen[target] = p
		outs = append(outs, Output{Path: p, Format: f})
	}
	return outs, nil
}

// CheckPath refuses, before any work, an output file path that cannot be
// written (its directory missing or read-only, another user's link, not a
// regular file) or that is one of the inputs.
func CheckPath(path string, inputs ...string) error {
	_, err := checkPath(path, inputs...)
	return err
}

// checkPath is CheckPath, returning the file path names.
func checkPath(path string, inputs ...string) (string, error) {
	target, err := resolve(path)
	if err != nil {
		return "", err
	}
	if err := writableDir(path, filepath.Dir(target)); err != nil {
		return "", err
	}
	for _, in := range inputs {
		if same(path, in) {
			return "", fmt.Errorf("output %s is the input %s: writing it would destroy the recording; choose another output path", path, in)
		}
	}
	return target, nil
}

// WriteFile writes path through a temporary file beside it, renamed over it
// once complete: a failed write leaves what was there.
func WriteFile(path string, write func(io.Writer) error) error { return writeFile(path, write) }

// resolve is the file an output path names: through a symbolic link of
// this user's, so that the link stays and its target is replaced; another
// user's link is refused. An existing output must
// be a regular file: a rename over a device or a directory is never meant.
func resolve(path string) (string, error) {
	if err := foreignDirLinks(path); err != nil {
		return "", err
	}
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return filepath.Abs(path)
	case err != nil:
		return "", fmt.Errorf("cannot write output %s: %w", path, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		// Another user's link could point anywhere this process may
		// write (as root: anywhere), planted in a shared directory.
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
			return "", fmt.Errorf("cannot write output %s: it is a symbolic link owned by uid %d, and cudatap does not write through another user's link; remove it or choose another path", path, st.Uid)
		}
		target, err := filepath.EvalSymlinks(path)
		if err != nil {
			return "", fmt.Errorf("cannot write output %s: resolve link: %w", path, err)
		}
		if fi, err = os.Stat(target); err != nil {
			return "", fmt.Errorf("cannot write output %s: %w", path, err)
		}
		path = target
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("cannot write output %s: not a regular file (outputs are written aside and renamed over the target); choose a file path", path)
	}
	return filepath.Abs(path)
}

// foreignDirLinks refuses a path whose directories go through a symbolic
// link of another user (neither this one nor root): planted in a shared
// directory, it could send root's output over any file (review 4c: a root
// 0600 file replaced, and made 0644). Links are followed as the kernel
// would, each checked.
func foreignDirLinks(path string) error {
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	dir, rest := "/", strings.Split(strings.Trim(filepath.Dir(abs), "/"), "/")
	for links := 0; len(rest) > 0; {
		part := rest[0]
		rest = rest[1:]
		if part == "" || part == "." {
			continue
		}
		next := filepath.Join(dir, part)
		fi, err := os.Lstat(next)
		if err != nil {
			return nil // not there yet: writableDir says so
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			dir = next
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != os.Geteuid() {
			return fmt.Errorf("cannot write output %s: %s is a symbolic link owned by uid %d, and cudatap does not write through another user's link; "+
				"choose a path without it", path, next, st.Uid)
		}
		if links++; links > 40 {
			return fmt.Errorf("cannot write output %s: too many levels of symbolic links", path)
		}
		target, err := os.Readlink(next)
		if err != nil {
			return fmt.Errorf("cannot write output %s: %w", path, err)
		}
		if filepath.IsAbs(target) {
			dir = "/"
		}
		rest = append(strings.Split(strings.Trim(target, "/"), "/"), rest...)
	}
	return nil
}

// writableDir checks that dir exists and that a file can be created in it.
func writableDir(path, dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("cannot write output %s: %w", path, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("cannot write output %s: %s is not a directory", path, dir)
	}
	if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
		return fmt.Errorf("cannot write output %s: directory %s: %w", path, dir, err)
	}
	return nil
}

// same reports whether paths a and b name one existing file (also through
// links, hard or symbolic).
func same(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// tempFile is an output being written: a file next to its target, renamed
// over it when complete.
type tempFile struct {
	path, target string
	f            *os.File
	unnamed      bool // f has no name yet (createUnnamed)
}

// createUnnamed is createTemp for an output written while a session runs:
// its file gets a name only once complete (O_TMPFILE), so that a cudatap
// killed meanwhile leaves no half of it behind. A file system without
// O_TMPFILE gets createTemp's.
func createUnnamed(path string) (*tempFile, error) {
	target, err := resolve(path)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Open(filepath.Dir(target), unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) {
		return createTemp(path)
	}
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), target)
	if err := f.Chmod(0o644); err != nil { // whatever the umask, as createTemp's
		f.Close()
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	return &tempFile{path: path, target: target, f: f, unnamed: true}, nil
}

// link gives an unnamed file a temporary name beside its target, for
// commit to rename.
func (t *tempFile) link() (string, error) {
	proc := "/proc/self/fd/" + strconv.Itoa(int(t.f.Fd()))
	for i := 0; ; i++ {
		name := fmt.Sprintf("%s/.%s.%d-%d.tmp", filepath.Dir(t.target), filepath.Base(t.target), os.Getpid(), i)
		err := unix.Linkat(unix.AT_FDCWD, proc, unix.AT_FDCWD, name, unix.AT_SYMLINK_FOLLOW)
		if err == nil {
			return name, nil
		}
		if !errors.Is(err, unix.EEXIST) || i >= 100 {
			return "", fmt.Errorf("link %s into place: %w", t.target, err)
		}
	}
}

func createTemp(path string) (*tempFile, error) {
	target, err := resolve(path)
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(filepath.Dir(target), "."+filepath.Base(target)+".*.tmp") // O_EXCL
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	// Readable like any file the user creates, whatever the umask: traces
	// are opened by viewers running as other users.
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	return &tempFile{path: path, target: target, f: f}, nil
}

// commit closes the file and renames it over the target.
func (t *tempFile) commit() error {
	name := t.f.Name()
	if t.unnamed {
		var err error
		if name, err = t.link(); err != nil {
			t.f.Close()
			return err
		}
	}
	err := t.f.Close()
	if err == nil {
		err = os.Rename(name, t.target)
	}
	if err != nil {
		os.Remove(name)
	}
	return err
}

// abort closes and removes the file, leaving the target as it was.
func (t *tempFile) abort() {
	t.f.Close()
	if !t.unnamed {
		os.Remove(t.f.Name())
	}
}

// Aggregates are the sinks that summarize a whole recording in memory
// bounded by distinct call sites: the pprof profile and the sync sites
// (for `cudatap syncs` and the summary).
type Aggregates struct {
	Profile    *pprofout.Collector
	Syncs      *syncs.Collector
	Stragglers *straggler.Collector
	// Progress follows each NCCL rank live (hangs: which rank stopped
	// arriving, which wait).
	Progress *straggler.Progress
	// Lints runs the lints of `cudatap lint` and the summary's section.
	Lints *lint.Collector
	// Steps finds the training steps: the summary's step times.
	Steps *steps.Detector
}

// NewAggregates returns empty aggregates.
func NewAggregates() *Aggregates {
	return &Aggregates{Profile: pprofout.NewCollector(), Syncs: syncs.NewCollector(), Stragglers: straggler.NewCollector(), Progress: straggler.NewProgress(),
		Lints: lint.NewCollector(lint.DefaultOptions()), Steps: steps.NewDetector(true)}
}

// Sink feeds every aggregate.
func (a *Aggregates) Sink() model.Sink {
	return model.Sinks{a.Profile, a.Syncs, a.Stragglers, a.Progress, a.Lints, a.Steps}
}

// WritePprof writes the profile of agg to every pprof output. An output
// that fails is removed and reported, naming its path, and the others are
// still written.
func WritePprof(outs []Output, r *model.Result, agg *Aggregates) error {
	var collected *pprofout.Collector
	if agg != nil {
		collected = agg.Profile
	}
	var prof *profile.Profile
	var errs []error
	for _, o := range outs {
		if o.Format != Pprof {
			continue
		}
		if prof == nil {
			// Built once, and validated before any file is touched.
			var err error
			if prof, err = pprofout.Build(r, collected, pprofout.Options{Modules: Modules(r.Names)}); err != nil {
				return err
			}
		}
		errs = append(errs, writeOutput(o, prof.Write))
	}
	return errors.Join(errs...)
}

// writeOutput writes o: to its W when it is Stdout, else to its file.
func writeOutput(o Output, write func(io.Writer) error) error {
	if o.Path != Stdout {
		if err := writeFile(o.Path, write); err != nil {
			return &OutputError{Path: o.Path, Err: err}
		}
		return nil
	}
	if o.W == nil {
		return &OutputError{Path: Stdout, Err: fmt.Errorf("write %s to the standard output: this command cannot write there; give a file", o.Format)}
	}
	if err := write(o.W); err != nil {
		return &OutputError{Path: Stdout, Err: fmt.Errorf("write %s to the standard output: %w", o.Format, err)}
	}
	return nil
}

// OutputError is an output that was not written (its message names it):
// what was there before stays, and no "wrote" line may claim it.
type OutputError struct {
	Path string // as given; Stdout for the standard output
	Err  error
}

func (e *OutputError) Error() string { return e.Err.Error() }
func (e *OutputError) Unwrap() error { return e.Err }

// FailedOutputs lists the paths of the OutputErrors in err (joined errors
// too).
func FailedOutputs(err error) map[string]bool {
	failed := map[string]bool{}
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case nil:
		case *OutputError:
			failed[e.Path] = true
		case interface{ Unwrap() []error }:
			for _, x := range e.Unwrap() {
				walk(x)
			}
		case interface{ Unwrap() error }:
			walk(e.Unwrap())
		}
	}
	walk(err)
	return failed
}

// writeFile writes path through a temporary file.
func writeFile(path string, write func(io.Writer) error) error {
	t, err := createTemp(path)
	if err != nil {
		return err
	}
	if err := write(t.f); err != nil {
		t.abort()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := t.commit(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// chromeOut is one trace being written, Chrome or Perfetto.
type chromeOut struct {
	path   string
	format Format
	t      *tempFile
	pipe   bool          // written to the standard output, until Close or Abort
	zw     *pgzip.Writer // for .gz outputs
	w      traceWriter
	err    error    // it could not be created
	held   *os.File // a live trace's events held until named, unlinked
}

// traceWriter is a trace format's writer: a sink for the replayed
// recording, closed with its result.
type traceWriter interface {
	model.Sink
	Close(*model.Result) error
}

// ChromeSet streams the model's events to every trace output at once,
// Chrome and Perfetto, through its Sink, and is closed with the result:
// record feeds it from its session as it runs (Options.Live), export from
// a replay of the recording.
type ChromeSet struct {
	outs []*chromeOut
}

// gzipBlock is what each core of a .gz output compresses at a time: the
// members of a gzip file compressed in parallel (pgzip), 1 MiB each.
const gzipBlock = 1 << 20

// CreateChrome opens a temporary file (gzip-compressed, on every core, for
// .gz paths) and starts a trace for every Chrome and Perfetto output; nil
// when there are none. An output whose file cannot be created does not
// stop the others: Close reports it. names names what the traces show
// (see chrome.NewWriter).
func CreateChrome(outs []Output, names *model.Names, opts Options) (*ChromeSet, error) {
	var s ChromeSet
	start := func(c *chromeOut, w io.Writer, dir string) {
		var pending io.ReadWriteSeeker
		if opts.Live {
			f, err := os.CreateTemp(dir, ".cudatap-held-*")
			if err != nil {
				c.err = fmt.Errorf("a live trace needs a file beside it for the events named late: %w", err)
				return
			}
			os.Remove(f.Name()) // read back through f: never left behind
			c.held, pending = f, f
		}
		if c.format == Perfetto {
			c.w = perfetto.NewWriter(w, names, perfetto.Options{Version: opts.Version, Origins: opts.Origins, Merge: opts.Merge, Pending: pending})
			return
		}
		c.w = chrome.NewWriter(w, names, chrome.Options{Version: opts.Version, Counters: opts.Counters, Origins: opts.Origins, Merge: opts.Merge, Pending: pending})
	}
	for _, o := range outs {
		if o.Format != Chrome && o.Format != Perfetto {
			continue
		}
		c := &chromeOut{path: o.Path, format: o.Format}
		s.outs = append(s.outs, c)
		if o.Path == Stdout {
			if o.W == nil {
				c.err = errors.New("this command cannot write to the standard output; give a file")
				continue
			}
			c.pipe = true
			start(c, o.W, os.TempDir())
			continue
		}
		create := createTemp
		if opts.Live {
			create = createUnnamed // a cudatap killed while tracing leaves none of it
		}
		t, err := create(o.Path)
		if err != nil {
			c.err = err
			continue
		}
		c.t = t
		var w io.Writer = t.f
		if strings.HasSuffix(o.Path, ".gz") {
			c.zw, _ = pgzip.NewWriterLevel(t.f, pgzip.BestSpeed)
			c.zw.SetConcurrency(gzipBlock, runtime.GOMAXPROCS(0))
			w = c.zw
		}
		start(c, w, filepath.Dir(t.target))
		if c.err != nil {
			c.abort()
		}
	}
	if len(s.outs) == 0 {
		return nil, nil
	}
	return &s, nil
}

// Sink feeds every trace being written (model.Discard when there is none).
func (s *ChromeSet) Sink() model.Sink {
	if s == nil {
		return model.Discard{}
	}
	var sinks model.Sinks
	for _, c := range s.outs {
		if c.w != nil {
			sinks = append(sinks, c.w)
		}
	}
	switch len(sinks) {
	case 0:
		return model.Discard{}
	case 1:
		return sinks[0]
	}
	return sinks
}

// Close finishes every trace with r's track names, counters and loss
// account, and renames the complete ones over their targets. A trace that
// failed is removed and reported, naming its path; the others are still
// written.
func (s *ChromeSet) Close(r *model.Result) error {
	if s == nil {
		return nil
	}
	var errs []error
	for _, c := range s.outs {
		if c.err != nil {
			errs = append(errs, &OutputError{Path: c.path, Err: fmt.Errorf("write %s trace %s: %w", c.format, c.path, c.err)})
			continue
		}
		if c.pipe {
			c.pipe = false
			err := c.w.Close(r)
			c.closeHeld()
			if err != nil {
				errs = append(errs, &OutputError{Path: Stdout, Err: fmt.Errorf("write %s trace to the standard output: %w", c.format, err)})
			}
			continue
		}
		if c.t == nil {
			continue // already closed or aborted
		}
		err := c.w.Close(r)
		c.closeHeld()
		if c.zw != nil {
			if zerr := c.zw.Close(); err == nil {
				err = zerr
			}
		}
		if err != nil {
			c.t.abort()
		} else {
			err = c.t.commit()
		}
		c.t = nil
		if err != nil {
			errs = append(errs, &OutputError{Path: c.path, Err: fmt.Errorf("write %s trace %s: %w", c.format, c.path, err)})
		}
	}
	return errors.Join(errs...)
}

// Abort removes every temporary file, leaving the targets as they were:
// for error paths, before or instead of Close.
func (s *ChromeSet) Abort() {
	if s == nil {
		return
	}
	for _, c := range s.outs {
		c.pipe = false // what went to the standard output stays there, cut
		c.abort()
	}
}

// abort removes the trace's temporary files.
func (c *chromeOut) abort() {
	c.closeHeld()
	if c.t != nil {
		if c.zw != nil {
			c.zw.Close() // ends its compressing goroutines
		}
		c.t.abort()
		c.t = nil
	}
}

// closeHeld closes the file of the events held until named (unlinked: it
// is gone).
func (c *chromeOut) closeHeld() {
	if c.held != nil {
		c.held.Close()
		c.held = nil
	}
}
