package python

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cudatap/cudatap/internal/objfile"
	"github.com/cudatap/cudatap/internal/procfs"
)

// The BPF test compiles testdata/walk.bpf.c (bpf/python.h's walk_python
// behind a uprobe) with the flags of tracer/generate.go, loads it (the
// kernel's verifier must accept it), attaches it to libc's getppid in a
// Python process and checks the frames it records.

var (
	bpfOnce sync.Once
	bpfObj  string
	bpfErr  error
	bpfDir  string
)

func bpfClang() string {
	if cc := os.Getenv("BPF_CLANG"); cc != "" {
		return cc
	}
	for _, cc := range []string{"clang-19", "clang-16", "clang"} {
		if p, err := exec.LookPath(cc); err == nil {
			return p
		}
	}
	return ""
}

// compileWalkBPF compiles testdata/walk.bpf.c once per test binary.
func compileWalkBPF(t *testing.T) string {
	t.Helper()
	if obj := os.Getenv("CUDATAP_TEST_BPF_OBJ"); obj != "" { // prebuilt (machines without clang)
		return obj
	}
	cc := bpfClang()
	if cc == "" {
		t.Skip("no clang to compile BPF")
	}
	bpfOnce.Do(func() {
		bpfDir, bpfErr = os.MkdirTemp("", "cudatap-python-bpf-")
		if bpfErr != nil {
			return
		}
		bpfObj = filepath.Join(bpfDir, "walk.o")
		out, err := exec.Command(cc, "-O2", "-mcpu=v1", "-g", "-Wall", "-Werror",
			"-I/usr/include/x86_64-linux-gnu", "-I../../bpf", "-D__TARGET_ARCH_x86",
			"-target", "bpfel", "-c", "testdata/walk.bpf.c", "-o", bpfObj).CombinedOutput()
		if err != nil {
			bpfErr = fmt.Errorf("compile testdata/walk.bpf.c: %v\n%s", err, out)
		}
	})
	if bpfErr != nil {
		t.Fatal(bpfErr)
	}
	return bpfObj
}

func TestMain(m *testing.M) {
	code := m.Run()
	if bpfDir != "" {
		os.RemoveAll(bpfDir)
	}
	os.Exit(code)
}

// eventLayout is where struct event keeps what walk_python writes, from
// the object's BTF (cudatap.h is edited by others; no copy of it here).
type eventLayout struct {
	size                     int
	pid, tid, flags, npy, py int
	truncated                uint32
}

func readEventLayout(t *testing.T, spec *ebpf.CollectionSpec) eventLayout {
	t.Helper()
	var st *btf.Struct
	if err := spec.Types.TypeByName("event", &st); err != nil {
		t.Fatalf("struct event in BTF: %v", err)
	}
	el := eventLayout{size: int(st.Size)}
	off := map[string]*int{"pid": &el.pid, "tid": &el.tid, "flags": &el.flags, "npy": &el.npy, "py": &el.py}
	for _, m := range st.Members {
		if p, ok := off[m.Name]; ok {
			*p = int(m.Offset.Bytes())
			delete(off, m.Name)
		}
	}
	if len(off) > 0 {
		t.Fatalf("struct event lacks %v", off)
	}
	var cfg *btf.Struct
	if err := spec.Types.TypeByName("py_config", &cfg); err != nil {
		t.Fatalf("struct py_config in BTF: %v", err)
	}
	if cfg.Size != ConfigSize {
		t.Fatalf("sizeof(struct py_config) = %d, Go says %d", cfg.Size, ConfigSize)
	}
	// Same fields, same order, same offsets as Config.MarshalBinary.
	want := []string{"runtime_addr", "version", "off_runtime_interp_head", "off_interp_threads_head",
		"off_tstate_next", "off_tstate_native_tid", "off_tstate_frame", "off_cframe_current",
		"off_frame_back", "off_frame_code", "off_frame_instr", "off_frame_owner", "instr_is_ptr",
		"off_tstate_thread_id", "off_code_filename", "off_code_name", "off_code_linetable", "off_frame_is_entry"}
	if len(cfg.Members) != len(want) {
		t.Fatalf("struct py_config has %d fields, want %d", len(cfg.Members), len(want))
	}
	for i, m := range cfg.Members {
		wantOff := 0
		if i > 0 {
			wantOff = 8 + 4*(i-1)
		}
		if m.Name != want[i] || int(m.Offset.Bytes()) != wantOff {
			t.Errorf("py_config field %d: %s at %d, want %s at %d", i, m.Name, m.Offset.Bytes(), want[i], wantOff)
		}
	}
	data, err := os.ReadFile("../../bpf/cudatap.h")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`#define EV_PY_TRUNCATED (0x[0-9a-fA-F]+)`).FindSubmatch(data)
	if m == nil {
		t.Fatal("no EV_PY_TRUNCATED in cudatap.h")
	}
	v, _ := strconv.ParseUint(string(m[1]), 0, 32)
	el.truncated = uint32(v)
	return el
}

type pyEvent struct {
	pid, tid  uint32
	truncated bool
	raw       []RawFrame
}

func (el eventLayout) decode(b []byte) pyEvent {
	le := binary.LittleEndian
	ev := pyEvent{
		pid:       le.Uint32(b[el.pid:]),
		tid:       le.Uint32(b[el.tid:]),
		truncated: le.Uint32(b[el.flags:])&el.truncated != 0,
	}
	n := int(le.Uint32(b[el.npy:]))
	for i := 0; i < n && i < MaxFrames; i++ {
		o := el.py + 16*i
		ev.raw = append(ev.raw, RawFrame{Code: le.Uint64(b[o:]), Instr: le.Uint64(b[o+8:])})
	}
	return ev
}

// nextEvent returns the next record from process pid.
func nextEvent(t *testing.T, rd *ringbuf.Reader, el eventLayout, pid int) pyEvent {
	t.Helper()
	rd.SetDeadline(time.Now().Add(10 * time.Second))
	for {
		rec, err := rd.Read()
		if err != nil {
			t.Fatalf("no event from process %d: %v", pid, err)
		}
		if len(rec.RawSample) < el.size {
			t.Fatalf("record of %d bytes, want %d", len(rec.RawSample), el.size)
		}
		if ev := el.decode(rec.RawSample); int(ev.pid) == pid {
			return ev
		}
	}
}

func libcPath(t *testing.T, pid int) string {
	t.Helper()
	maps, err := objfile.ReadMaps(pid)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objfile.ObjectFiles(maps) {
		if b := filepath.Base(o.Path); strings.HasPrefix(b, "libc.so") || strings.HasPrefix(b, "libc-") {
			return o.Path
		}
	}
	t.Fatalf("no libc in process %d", pid)
	return ""
}

// loadWalkBPF loads the test program; the verifier must accept it.
func loadWalkBPF(t *testing.T) (*ebpf.Collection, *ringbuf.Reader, eventLayout) {
	t.Helper()
	spec, err := ebpf.LoadCollectionSpec(compileWalkBPF(t))
	if err != nil {
		t.Fatal(err)
	}
	el := readEventLayout(t, spec)
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			t.Fatalf("verifier: %+v", ve)
		}
		t.Fatal(err)
	}
	t.Cleanup(coll.Close)
	rd, err := ringbuf.NewReader(coll.Maps["events"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	return coll, rd, el
}

func TestBPFWalk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to load BPF and attach uprobes")
	}
	pys := supportedPythons(t)
	coll, rd, el := loadWalkBPF(t)
	configs := coll.Maps["py_configs"]

	for _, p := range pys {
		t.Run(p.name(), func(t *testing.T) {
			tg := startTarget(t, p.exe)
			cfg, in, err := Detect(tg.pid)
			if err != nil {
				t.Fatal(err)
			}
			if err := configs.Put(uint32(tg.pid), cfg); err != nil {
				t.Fatal(err)
			}
			defer configs.Delete(uint32(tg.pid))
			ex, err := link.OpenExecutable(libcPath(t, tg.pid))
			if err != nil {
				t.Fatal(err)
			}
			up, err := ex.Uprobe("getppid", coll.Programs["walk"], &link.UprobeOptions{PID: tg.pid})
			if err != nil {
				t.Fatal(err)
			}
			defer up.Close()

			check := func(what string, ev pyEvent, want []Frame, truncated bool) {
				t.Helper()
				got := in.Frames(ev.raw)
				if !equalFrames(got, want) || ev.truncated != truncated {
					t.Errorf("%s: truncated %v (want %v), frames:%s\nwant:%s", what, ev.truncated, truncated, framesString(got), framesString(want))
				}
			}
			// Which frames were entered from C, for "call n".
			entries := func(what string, ev pyEvent, n int) {
				t.Helper()
				checkEntries(t, what, ev.raw, mainEntries(p.minor, len(tg.mainFrames(p.minor, "call", n))))
			}

			tg.send("call 2\n")
			tg.expect("done")
			ev := nextEvent(t, rd, el, tg.pid)
			if int(ev.tid) != tg.pid {
				t.Errorf("event from thread %d, want the main thread", ev.tid)
			}
			check("call 2", ev, tg.mainFrames(p.minor, "call", 2), false)
			entries("call 2", ev, 2)

			tg.send("call 30\n")
			tg.expect("done")
			ev = nextEvent(t, rd, el, tg.pid)
			check("call 30", ev, tg.mainFrames(p.minor, "call", 30)[:MaxFrames], true)
			entries("call 30", ev, 30)

			// Exactly MaxFrames frames: nothing left out.
			tg.send(fmt.Sprintf("call %d\n", MaxFrames-7))
			tg.expect("done")
			ev = nextEvent(t, rd, el, tg.pid)
			check("call MaxFrames", ev, tg.mainFrames(p.minor, "call", MaxFrames-7), false)
			entries("call MaxFrames", ev, MaxFrames-7)

			// Another thread: its own frames, not the main thread's.
			tg.send("thread 1 call\n")
			nstid, _ := strconv.Atoi(strings.Fields(tg.expect("tid"))[1])
			tg.expect("done")
			ev = nextEvent(t, rd, el, tg.pid)
			if n, err := procfs.ThreadNSPID(tg.pid, int(ev.tid)); err == nil && n != nstid {
				t.Errorf("event from thread %d, want %d", n, nstid)
			}
			want := append(tg.recFrames(p.minor, "call", 1), tg.frame("worker", "worker"))
			got := in.Frames(ev.raw)
			if len(got) < len(want) || !equalFrames(got[:len(want)], want) {
				t.Errorf("thread: frames:%s\nwant first:%s", framesString(got), framesString(want))
			}
			for _, f := range got[min(len(want), len(got)):] {
				if filepath.Base(f.File) != "threading.py" {
					t.Errorf("thread: frame %v below worker(), want threading.py", f)
				}
			}

			// 3.11+ can also match threads by native_thread_id (host
			// pid namespace only).
			if cfg.OffTstateNativeTID != NoOffset {
				native := *cfg
				native.OffTstateThreadID = NoOffset
				if err := configs.Put(uint32(tg.pid), native); err != nil {
					t.Fatal(err)
				}
				tg.send("call 0\n")
				tg.expect("done")
				check("native tid", nextEvent(t, rd, el, tg.pid), tg.mainFrames(p.minor, "call", 0), false)
			}
		})
	}
}
