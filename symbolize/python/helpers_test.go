package python

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// pyInstall is one interpreter found on the machine.
type pyInstall struct {
	exe     string // e.g. /root/.pyenv/versions/3.12.1/bin/python3.12
	minor   int
	include string // directory with Python.h and internal/, "" if none
}

func (p pyInstall) name() string {
	return fmt.Sprintf("3.%d:%s", p.minor, strings.ReplaceAll(p.exe, "/", "_"))
}

var exeName = regexp.MustCompile(`^python3\.(\d+)$`)

// findPythons lists the CPython 3 interpreters to test against: those of
// pyenv (/root/.pyenv/versions/*), /usr/bin/python3.X and
// $CUDATAP_TEST_PYTHONS (colon-separated executables).
func findPythons() []pyInstall {
	var exes []string
	home, _ := os.UserHomeDir()
	for _, root := range []string{"/root/.pyenv/versions", filepath.Join(home, ".pyenv/versions")} {
		m, _ := filepath.Glob(filepath.Join(root, "*", "bin", "python3.*"))
		exes = append(exes, m...)
	}
	m, _ := filepath.Glob("/usr/bin/python3.*")
	exes = append(exes, m...)
	var extra []string
	if env := os.Getenv("CUDATAP_TEST_PYTHONS"); env != "" {
		extra = strings.Split(env, ":")
		exes = append(exes, extra...)
	}
	seen := map[string]bool{}
	var out []pyInstall
	for _, exe := range exes {
		sm := exeName.FindStringSubmatch(filepath.Base(exe))
		if sm == nil && slices.Contains(extra, exe) {
			// Named python3 or so: ask it.
			v, err := exec.Command(exe, "-c", "import sys; print(sys.version_info[1])").Output()
			if err == nil {
				sm = []string{"", strings.TrimSpace(string(v))}
			}
		}
		if sm == nil {
			continue
		}
		real, err := filepath.EvalSymlinks(exe)
		if err != nil || seen[real] {
			continue
		}
		if fi, err := os.Stat(real); err != nil || fi.Mode()&0o111 == 0 {
			continue
		}
		seen[real] = true
		p := pyInstall{exe: exe}
		p.minor, _ = strconv.Atoi(sm[1])
		inc := filepath.Join(filepath.Dir(filepath.Dir(exe)), "include", "python3."+sm[1])
		if _, err := os.Stat(filepath.Join(inc, "internal", "pycore_runtime.h")); err == nil {
			p.include = inc
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].minor != out[j].minor {
			return out[i].minor < out[j].minor
		}
		return out[i].exe < out[j].exe
	})
	return out
}

// supportedPythons returns the interpreters of versions 3.9–3.13, skipping
// the test when there is none.
func supportedPythons(t *testing.T) []pyInstall {
	t.Helper()
	var out []pyInstall
	for _, p := range findPythons() {
		if layouts[p.minor] != nil {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		t.Skip("no CPython 3.9-3.13 found (pyenv, /usr/bin/python3.X or $CUDATAP_TEST_PYTHONS)")
	}
	return out
}

// target is a running testdata/target.py.
type target struct {
	t       testing.TB
	cmd     *exec.Cmd
	in      io.WriteCloser
	out     *bufio.Reader
	pid     int
	version string
	script  string
	lines   map[string]int // "# @name" marker -> line
}

func startTarget(t testing.TB, exe string) *target {
	t.Helper()
	return startTargetScript(t, exe, "testdata/target.py")
}

func startTargetScript(t testing.TB, exe, path string) *target {
	t.Helper()
	script, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-u", script)
	cmd.Env = append(os.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tg := &target{t: t, cmd: cmd, in: in, out: bufio.NewReader(out), pid: cmd.Process.Pid, script: script}
	t.Cleanup(func() {
		in.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	f := strings.Fields(tg.expect("ready"))
	if len(f) != 3 {
		t.Fatalf("bad ready line %q", f)
	}
	tg.version = f[2]
	tg.lines = scriptLines(t, script)
	return tg
}

func scriptLines(t testing.TB, path string) map[string]int {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string]int{}
	for i, l := range strings.Split(string(data), "\n") {
		if _, m, ok := strings.Cut(l, "# @"); ok {
			lines[strings.TrimSpace(m)] = i + 1
		}
	}
	return lines
}

func (tg *target) send(s string) {
	tg.t.Helper()
	if _, err := io.WriteString(tg.in, s); err != nil {
		tg.t.Fatal(err)
	}
}

// expect reads lines until one starts with prefix and returns it.
func (tg *target) expect(prefix string) string {
	tg.t.Helper()
	type res struct {
		line string
		err  error
	}
	ch := make(chan res, 1)
	go func() {
		for {
			l, err := tg.out.ReadString('\n')
			if err != nil || strings.HasPrefix(l, prefix) {
				ch <- res{strings.TrimSpace(l), err}
				return
			}
		}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			tg.t.Fatalf("waiting for %q from the target: %v", prefix, r.err)
		}
		return r.line
	case <-time.After(60 * time.Second):
		tg.t.Fatalf("timed out waiting for %q from the target", prefix)
	}
	return ""
}

// frame builds an expected frame of target.py.
func (tg *target) frame(marker, fn string) Frame {
	l, ok := tg.lines[marker]
	if !ok {
		tg.t.Fatalf("no marker %q in target.py", marker)
	}
	return Frame{File: tg.script, Line: l, Function: fn}
}

// recFrames is what rec(n, mode) shows, innermost first, up to (not
// including) its caller.
func (tg *target) recFrames(minor int, mode string, n int) []Frame {
	lambda, meth := "<lambda>", "meth"
	if minor >= 11 { // co_qualname
		lambda, meth = "middle.<locals>.<lambda>", "K.meth"
	}
	fs := []Frame{
		tg.frame("leaf_"+mode, "leaf"),
		tg.frame("middle", lambda),
		tg.frame("middle", "middle"),
		tg.frame("meth", meth),
		tg.frame("rec_base", "rec"),
	}
	for i := 0; i < n; i++ {
		fs = append(fs, tg.frame("rec_step", "rec"))
	}
	return fs
}

// mainFrames is what the main thread shows for "call"/"block" n.
func (tg *target) mainFrames(minor int, mode string, n int) []Frame {
	return append(tg.recFrames(minor, mode, n), tg.frame("main_"+mode, "main"), tg.frame("module", "<module>"))
}

// mainEntries is which of mainFrames(minor, mode, n) were entered from C:
// every frame up to 3.10; from 3.11 the lambda map() calls and <module>.
func mainEntries(minor, frames int) []bool {
	e := make([]bool, frames)
	for i := range e {
		e[i] = minor <= 10 || i == 1 || i == frames-1
	}
	return e
}

// checkEntries compares the entry flags of a walk's frames with want
// (which may be longer: a walk cut short), all of them known.
func checkEntries(t *testing.T, what string, raw []RawFrame, want []bool) {
	t.Helper()
	got := make([]bool, len(raw))
	for i, r := range raw {
		entry, known := r.Entry()
		if !known {
			t.Errorf("%s: frame %d: entry flag not known", what, i)
		}
		got[i] = entry
	}
	if len(want) < len(got) || !slices.Equal(got, want[:len(got)]) {
		t.Errorf("%s: entry frames %v, want %v", what, got, want)
	}
}

func framesString(fs []Frame) string {
	var b strings.Builder
	for _, f := range fs {
		b.WriteString("\n\t")
		b.WriteString(f.String())
	}
	return b.String()
}

func equalFrames(a, b []Frame) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
