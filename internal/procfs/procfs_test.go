package procfs

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestParseStat(t *testing.T) {
	// fields 3.. of a real line: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
	const rest = " S 1 4123 4123 0 -1 4194560 1520 0 3 0 250 17 0 0 20 0 7 0 9912 1000000 300 18446744073709551615\n"
	for _, tc := range []struct {
		line         string
		state        byte
		ticks, start uint64
	}{
		{"4123 (python3)" + rest, 'S', 267, 9912},
		{"4123 (a) b (c)" + rest, 'S', 267, 9912},                                        // ')' and spaces inside comm
		{"4123 ())))" + rest, 'S', 267, 9912},                                            // nothing but ')'
		{"4123 (x) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19", 'R', 11 + 12, 19}, // after the comm, state is first
		{"77 (zombie) Z 1 77 77 0 -1 0 0 0 0 0 0 0 0 0 0 0 0 0 5", 'Z', 0, 5},
	} {
		st, err := parseStat([]byte(tc.line))
		if err != nil {
			t.Errorf("%q: %v", tc.line, err)
			continue
		}
		if st.State != tc.state || st.CPUTicks != tc.ticks || st.StartTicks != tc.start {
			t.Errorf("%q: state %c ticks %d start %d, want %c %d %d", tc.line, st.State, st.CPUTicks, st.StartTicks, tc.state, tc.ticks, tc.start)
		}
	}
	for _, bad := range []string{"", "4123 python3 S 1", "4123 (x) S 1 2 3", "4123 (x) S 1 2 3 4 5 6 7 8 9 10 u 12 13", "1 (x) SS 1 2 3 4 5 6 7 8 9 10 11 12"} {
		if _, err := parseStat([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestParseCmdline(t *testing.T) {
	for in, want := range map[string][]string{
		"":                        nil,
		"python3\x00train.py\x00": {"python3", "train.py"},
		"a b\x00\x00c\x00":        {"a b", "", "c"},
		"setproctitle rewrote me": {"setproctitle rewrote me"},
	} {
		if got := parseCmdline([]byte(in)); !slices.Equal(got, want) {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

func TestFindField(t *testing.T) {
	status := "Name:\tpython3\nNSpid:\t4123\t17\t1\nCapEff:\t000001ffffffffff\n"
	for key, want := range map[string]string{"Name": "python3", "NSpid": "4123\t17\t1", "CapEff": "000001ffffffffff"} {
		if v, ok, err := findField(strings.NewReader(status), key); !ok || err != nil || v != want {
			t.Errorf("%s: %q %v %v, want %q", key, v, ok, err, want)
		}
	}
	if _, ok, _ := findField(strings.NewReader(status), "Nam"); ok {
		t.Error("a key's prefix matched")
	}
}

func TestContainerFromCgroup(t *testing.T) {
	const id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	const pod = "8f1c0d2e-5a3b-4c6d-9e7f-a0b0c0d00000"
	for _, tc := range []struct{ cgroup, container, pod string }{
		{"0::/init.scope\n", "", ""},
		{"0::/user.slice/user-1000.slice/session-3.scope\n", "", ""},
		{"0::/system.slice/docker-" + id + ".scope\n", id, ""},
		{"12:cpu,cpuacct:/docker/" + id + "\n0::/\n", id, ""},
		{"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + strings.ReplaceAll(pod, "-", "_") +
			".slice/cri-containerd-" + id + ".scope\n", id, pod},
		{"0::/kubepods/besteffort/pod" + pod + "/" + id + "\n", id, pod},
		{"0::/crio-" + id + ".scope\n", id, ""},
		{"garbage\n", "", ""},
	} {
		c, p := ContainerFromCgroup(tc.cgroup)
		if c != tc.container || p != tc.pod {
			t.Errorf("%q: %q %q, want %q %q", tc.cgroup, c, p, tc.container, tc.pod)
		}
	}
}

// TestSelf reads this test process's own files.
func TestSelf(t *testing.T) {
	runtime.LockOSThread() // the thread-level checks read this thread
	defer runtime.UnlockOSThread()
	pid := os.Getpid()
	if comm, err := Comm(pid); err != nil || !strings.HasPrefix(filepath.Base(os.Args[0]), comm) || comm == "" {
		t.Errorf("Comm = %q, %v; executable %s", comm, err, os.Args[0])
	}
	if args, err := Cmdline(pid); err != nil || !slices.Equal(args, os.Args) {
		t.Errorf("Cmdline = %q, %v; want %q", args, err, os.Args)
	}
	tid := syscall.Gettid()
	if name, err := ThreadComm(pid, tid); err != nil || name == "" {
		t.Errorf("ThreadComm = %q, %v", name, err)
	}
	if !ThreadAlive(tid) {
		t.Error("this thread is not alive")
	}
	if n, err := NSPID(pid); err != nil || n != pid {
		t.Errorf("NSPID = %d, %v; want %d", n, err, pid)
	}
	if n, err := ThreadNSPID(pid, tid); err != nil || n != tid {
		t.Errorf("ThreadNSPID = %d, %v; want %d", n, err, tid)
	}
	if pids, err := PIDs(); err != nil || !slices.Contains(pids, pid) || !slices.Contains(pids, 1) {
		t.Errorf("PIDs: %d entries without this process or init (%v)", len(pids), err)
	}
	// The leader thread's state: running, or sleeping while another
	// thread of this process reads the file.
	if st, err := Stat(pid); err != nil || (st.State != 'R' && st.State != 'S') {
		t.Errorf("Stat = %+v, %v; want state R or S", st, err)
	}
	if st, err := Stat(tid); err != nil || st.State != 'R' {
		t.Errorf("Stat of this thread = %+v, %v; want state R", st, err)
	}
	if !Alive(pid) {
		t.Error("this process is not alive")
	}
	if _, err := Cgroup(pid); err != nil {
		t.Error(err)
	}
	if maps, err := Maps(pid); err != nil || !bytes.Contains(maps, []byte(mustExecutable(t))) {
		t.Errorf("Maps: %d bytes without this executable (%v)", len(maps), err)
	}
	if _, err := CapEff(); err != nil {
		t.Error(err)
	}
	var u syscall.Utsname
	if err := syscall.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var release []byte
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		release = append(release, byte(c))
	}
	if r, err := OSRelease(); err != nil || r != string(release) {
		t.Errorf("OSRelease = %q, %v; uname says %q", r, err, release)
	}
	if exe, err := Exe(pid); err != nil || exe != mustExecutable(t) {
		t.Errorf("Exe = %q, %v", exe, err)
	}
}

func mustExecutable(t *testing.T) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestZombieAndGone: a child that exited but is not reaped is not alive;
// once reaped its files are gone.
func TestZombieAndGone(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Skip("no true(1):", err)
	}
	pid := cmd.Process.Pid
	for { // until the child has exited: a condition, not a duration
		st, err := Stat(pid)
		if err != nil {
			t.Fatal(err)
		}
		if st.State == 'Z' {
			break
		}
		syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
	}
	if Alive(pid) {
		t.Error("a zombie is alive")
	}
	cmd.Wait()
	if Alive(pid) {
		t.Error("a reaped process is alive")
	}
	if _, err := Comm(pid); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Comm of a reaped process: %v, want ErrNotExist", err)
	}
	if _, err := Stat(pid); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Stat of a reaped process: %v, want ErrNotExist", err)
	}
	if _, err := Maps(pid); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Maps of a reaped process: %v, want ErrNotExist", err)
	}
}

func TestRSS(t *testing.T) {
	if rss := RSS(os.Getpid()); rss < 1<<20 || rss > 1<<40 {
		t.Errorf("RSS of this test %d bytes", rss)
	}
	if RSS(1<<30) != 0 {
		t.Error("RSS of a process that does not exist")
	}
}
