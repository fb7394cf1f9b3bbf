package python

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/cudatap/cudatap/internal/procfs"
)

func TestMarshalBinary(t *testing.T) {
	c := Config{RuntimeAddr: 0x1122334455667788, Version: 0x030c, OffRuntimeInterpHead: 1, OffInterpThreadsHead: 2,
		OffTstateNext: 3, OffTstateNativeTID: 4, OffTstateFrame: 5, OffCFrameCurrent: 6, OffFrameBack: 7,
		OffFrameCode: 8, OffFrameInstr: 9, OffFrameOwner: 10, InstrIsPtr: 11, OffTstateThreadID: 12,
		OffCodeFilename: 13, OffCodeName: 14, OffCodeLineTable: 15, OffFrameIsEntry: 16}
	b, err := c.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0x0c, 0x03, 0, 0}
	for i := uint32(1); i <= 16; i++ {
		want = append(want, byte(i), 0, 0, 0)
	}
	want = append(want, 0, 0, 0, 0) // padding
	if n := unsafe.Sizeof(c); n != ConfigSize {
		t.Errorf("sizeof(Config) = %d", n)
	}
	if !bytes.Equal(b, want) || len(b) != ConfigSize {
		t.Fatalf("MarshalBinary = % x\nwant            % x", b, want)
	}
}

var (
	offsetsMu    sync.Mutex
	offsetsCache = map[string]map[string]uint64{}
)

// offsetsFromHeaders compiles testdata/offsets.c against the interpreter's
// headers and returns its "name value" lines (once per include directory).
func offsetsFromHeaders(t *testing.T, p pyInstall) map[string]uint64 {
	t.Helper()
	if p.include == "" {
		t.Skipf("no internal headers for %s", p.exe)
	}
	offsetsMu.Lock()
	m, ok := offsetsCache[p.include]
	offsetsMu.Unlock()
	if ok {
		return m
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	bin := filepath.Join(t.TempDir(), "offsets")
	if out, err := exec.Command(cc, "-I"+p.include, "-o", bin, "testdata/offsets.c").CombinedOutput(); err != nil {
		t.Fatalf("compile testdata/offsets.c for %s: %v\n%s", p.exe, err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	m = map[string]uint64{}
	s := bufio.NewScanner(bytes.NewReader(out))
	for s.Scan() {
		f := strings.Fields(s.Text())
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		m[f[0]] = v
	}
	offsetsMu.Lock()
	offsetsCache[p.include] = m
	offsetsMu.Unlock()
	return m
}

// TestLayoutTable checks the table against offsetof in each interpreter's
// headers, without running it.
func TestLayoutTable(t *testing.T) {
	for _, p := range supportedPythons(t) {
		t.Run(p.name(), func(t *testing.T) {
			t.Parallel()
			checkLayout(t, offsetsFromHeaders(t, p), layouts[p.minor])
		})
	}
}

func checkLayout(t *testing.T, off map[string]uint64, l *layout) {
	t.Helper()
	v := reflect.ValueOf(*l)
	checked := 0
	for name, want := range off {
		var got uint64
		switch name {
		case "obType":
			got = offObType
		case "varSize":
			got = offVarSize
		case "bytesData":
			got = offBytesData
		case "strLength":
			got = offStrLength
		case "strState":
			got = offStrState
		case "unicodeData":
			got = l.compactSize
		default:
			f := v.FieldByName(name)
			if !f.IsValid() {
				t.Errorf("offsets.c prints %q, which the layout does not have", name)
				continue
			}
			if f.CanUint() {
				got = f.Uint()
			} else {
				got = uint64(f.Int())
			}
		}
		checked++
		if got != want {
			t.Errorf("%s = %d, headers say %d", name, got, want)
		}
	}
	// What the headers do not print must be absent from the version.
	for _, name := range []string{"tstateNativeTID", "cframeCurrent", "frameOwner", "frameIsEntry"} {
		if _, ok := off[name]; !ok {
			if got := v.FieldByName(name).Uint(); got != NoOffset {
				t.Errorf("%s = %d, want NoOffset", name, got)
			}
		}
	}
	if checked < 15 {
		t.Errorf("only %d offsets checked", checked)
	}
}

// TestDetect runs each interpreter and checks what Detect finds in the
// live process against the headers.
func TestDetect(t *testing.T) {
	for _, p := range supportedPythons(t) {
		t.Run(p.name(), func(t *testing.T) {
			tg := startTarget(t, p.exe)
			cfg, in, err := Detect(tg.pid)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: Python %s in %s, _PyRuntime at %#x", p.exe, in.Version(), in.Path(), cfg.RuntimeAddr)
			if want := tg.version; in.Version() != want && !(p.minor < 11 && strings.HasPrefix(want, in.Version()+".")) {
				t.Errorf("version %q, target says %q", in.Version(), want)
			}
			if cfg.Version != 3<<8|uint32(p.minor) {
				t.Errorf("config version %#x", cfg.Version)
			}
			if *cfg != in.Config() || *cfg != in.l.config(cfg.RuntimeAddr) {
				t.Errorf("config %+v does not match the interpreter's", cfg)
			}
			if in.codeType == 0 || in.unicodeType == 0 || in.bytesType == 0 {
				t.Errorf("type objects not found: code %#x str %#x bytes %#x", in.codeType, in.unicodeType, in.bytesType)
			}
			if p.include != "" {
				checkLayout(t, offsetsFromHeaders(t, p), &in.l)
			}
		})
	}
}

// TestDetectOther: versions without a layout, and processes without
// Python.
func TestDetectOther(t *testing.T) {
	n := 0
	for _, p := range findPythons() {
		if layouts[p.minor] != nil {
			continue
		}
		n++
		t.Run(p.name(), func(t *testing.T) {
			tg := startTarget(t, p.exe)
			_, _, err := Detect(tg.pid)
			if p.minor < 7 { // no _PyRuntime before 3.7
				if !errors.Is(err, ErrNotPython) {
					t.Fatalf("Detect = %v, want ErrNotPython", err)
				}
				return
			}
			if !errors.Is(err, ErrUnknownLayout) || !strings.Contains(err.Error(), "3.") {
				t.Fatalf("Detect = %v, want ErrUnknownLayout naming the version", err)
			}
			t.Log(err)
		})
	}
	t.Run("not-python", func(t *testing.T) {
		cmd := exec.Command("sleep", "30")
		if err := cmd.Start(); err != nil {
			t.Skip(err)
		}
		defer func() { cmd.Process.Kill(); cmd.Wait() }()
		if _, _, err := Detect(cmd.Process.Pid); !errors.Is(err, ErrNotPython) {
			t.Fatalf("Detect(sleep) = %v, want ErrNotPython", err)
		}
	})
	t.Run("gone", func(t *testing.T) {
		if _, _, err := Detect(1 << 30); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("Detect(no such pid) = %v, want os.ErrNotExist", err)
		}
	})
	if n == 0 {
		t.Log("no interpreter outside 3.9-3.13 to try")
	}
}

// waitFrames walks thread tid until its innermost frame is want (the
// thread has reached the blocking call) and returns the frames.
func waitFrames(t *testing.T, pid, tid int, want Frame) []Frame {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		fs, err := WalkThread(pid, tid)
		if err == nil && len(fs) > 0 && fs[0] == want {
			return fs
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d never reached %v: last walk %v%s", tid, want, err, framesString(fs))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestWalk checks the Go walker: the frames of blocked threads, exact.
func TestWalk(t *testing.T) {
	for _, p := range supportedPythons(t) {
		t.Run(p.name(), func(t *testing.T) {
			tg := startTarget(t, p.exe)

			// The main thread, blocked in a read under rec(2).
			tg.send("block 2\n")
			tg.expect("blocking")
			want := tg.mainFrames(p.minor, "block", 2)
			got := waitFrames(t, tg.pid, tg.pid, want[0])
			if !equalFrames(got, want) {
				t.Errorf("main thread:%s\nwant:%s", framesString(got), framesString(want))
			}
			if _, in, err := Detect(tg.pid); err != nil {
				t.Error(err)
			} else if raw, _, err := in.Walk(tg.pid); err != nil {
				t.Error(err)
			} else {
				checkEntries(t, "main thread", raw, mainEntries(p.minor, len(want)))
			}
			tg.send("x")
			tg.expect("done")

			// Deeper than MaxFrames: the innermost MaxFrames, truncated.
			tg.send("block 40\n")
			tg.expect("blocking")
			want = tg.mainFrames(p.minor, "block", 40)
			waitFrames(t, tg.pid, tg.pid, want[0])
			_, in, err := Detect(tg.pid)
			if err != nil {
				t.Fatal(err)
			}
			raw, truncated, err := in.Walk(tg.pid)
			if err != nil || !truncated || len(raw) != MaxFrames {
				t.Errorf("deep walk: %d frames, truncated %v, err %v", len(raw), truncated, err)
			}
			if got := in.Frames(raw); !equalFrames(got, want[:len(got)]) {
				t.Errorf("deep walk:%s\nwant:%s", framesString(got), framesString(want[:len(got)]))
			}
			checkEntries(t, "deep walk", raw, mainEntries(p.minor, len(want)))
			tg.send("x")
			tg.expect("done")

			// A second thread, blocked; the main thread waits in join().
			tg.send("thread 1 block\n")
			tid, err := strconv.Atoi(strings.Fields(tg.expect("tid"))[1])
			if err != nil {
				t.Fatal(err)
			}
			hostTID := hostTID(t, tg.pid, tid)
			want = append(tg.recFrames(p.minor, "block", 1), tg.frame("worker", "worker"))
			got = waitFrames(t, tg.pid, hostTID, want[0])
			if len(got) < len(want) || !equalFrames(got[:len(want)], want) {
				t.Errorf("worker thread:%s\nwant first:%s", framesString(got), framesString(want))
			}
			for _, f := range got[min(len(want), len(got)):] {
				if filepath.Base(f.File) != "threading.py" {
					t.Errorf("worker thread: frame %v below worker(), want threading.py", f)
				}
			}
			// Thread.start() returns only after the worker runs: the main
			// thread may still be inside it for a moment before join().
			tail := []Frame{tg.frame("main_join", "main"), tg.frame("module", "<module>")}
			var main []Frame
			for deadline := time.Now().Add(2 * time.Second); ; {
				main, err = WalkThread(tg.pid, tg.pid)
				if err != nil {
					t.Fatal(err)
				}
				if (len(main) >= 2 && equalFrames(main[len(main)-2:], tail)) || time.Now().After(deadline) {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if len(main) < 3 || !equalFrames(main[len(main)-2:], tail) || filepath.Base(main[0].File) != "threading.py" {
				t.Errorf("main thread in join():%s", framesString(main))
			}
			tg.send("x")
			tg.expect("done")
		})
	}
}

// hostTID maps a tid of the target's pid namespace to the host's (the
// same unless the test runs in a container of its own).
func hostTID(t *testing.T, pid, nstid int) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		tid, _ := strconv.Atoi(e.Name())
		if n, err := procfs.ThreadNSPID(pid, tid); err == nil && n == nstid {
			return tid
		}
	}
	t.Fatalf("no thread %d in process %d", nstid, pid)
	return 0
}
