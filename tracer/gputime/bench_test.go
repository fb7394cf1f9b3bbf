package gputime

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// BenchmarkJoin measures what each way of joining GPU records to their
// calls costs a launch-bound program (the simulated runtime's launch
// flood, one thread), against the same program without the collector, in
// the same run: plain, CUPTI's GPU records only (join=none, joined to
// nothing), GPU records plus callbacks on the enqueuing calls (callbacks,
// the default) and GPU records plus API records of every call (api). The
// ratios are the result (ns/launch of each over plain); on the simulator
// they show the collector's own share, CUPTI's being simulated.
//
//	go test -run '^$' -bench Join -benchtime 5x ./tracer/gputime/
func BenchmarkJoin(b *testing.B) {
	bld := simBuild(b)
	const launches = 200_000
	modes := []string{"plain", "none", "callbacks", "api"}
	total := map[string]time.Duration{}
	r := newRecorder()
	ls := map[string]*Listener{}
	for _, m := range modes[1:] {
		l, err := Listen(Config{Root: "/", UID: -1, GID: -1, Join: m}, r)
		if err != nil {
			b.Fatal(err)
		}
		defer l.Stop(time.Second)
		ls[m] = l
	}
	for range b.N {
		for _, m := range modes { // interleaved: the machine's drift hits all alike
			var env []string
			if l := ls[m]; l != nil {
				env = append(env, "CUDA_INJECTION64_PATH="+l.LibraryPath())
			}
			total[m] += flood(b, bld.Flood, launches, env)
		}
	}
	per := func(m string) float64 { return float64(total[m].Nanoseconds()) / float64(b.N*launches) }
	for _, m := range modes {
		b.ReportMetric(per(m), m+"-ns/launch")
		if m != "plain" {
			b.ReportMetric(per(m)/per("plain"), m+"/plain")
		}
	}
}

// flood runs the launch flood and returns how long its launches took,
// from the go-ahead to its count.
func flood(b *testing.B, bin string, n int, env []string) time.Duration {
	cmd := exec.Command(bin, "1", strconv.Itoa(n))
	cmd.Env = append(os.Environ(), env...)
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	outp, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	out := bufio.NewReader(outp)
	if line, err := out.ReadString('\n'); err != nil || line != "ready\n" {
		b.Fatalf("flood: %q %v", line, err)
	}
	start := time.Now()
	in.Write([]byte("go\n"))
	if _, err := out.ReadString('\n'); err != nil {
		b.Fatal(err)
	}
	d := time.Since(start)
	in.Close()
	if err := cmd.Wait(); err != nil {
		b.Fatal(err)
	}
	return d
}
