package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// ncclRuns numbers the jobs of this test process, for SIM_NCCL_RUN.
var ncclRuns atomic.Int64

// ncclJob is the processes of scenario nccl playing the ranks of one job.
type ncclJob struct {
	segment string
	ranks   []*ncclProc
}

type ncclProc struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer // read once done is closed
	done           chan struct{}
	err            error
}

// newRun returns a SIM_NCCL_RUN token of its own.
func newRun() string {
	return fmt.Sprintf("test-%d-%d", os.Getpid(), ncclRuns.Add(1))
}

// ncclEnv is the test's environment less any SIM_NCCL_* variables, and env.
func ncclEnv(env ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SIM_NCCL_") {
			out = append(out, kv)
		}
	}
	return append(out, env...)
}

// startJob starts n ranks of job id in run, each making iters all-reduces;
// extra[r] is rank r's own environment. The ranks still running when the
// test ends are killed, and the job's segment removed.
func startJob(t *testing.T, b *Build, run string, id uint64, n, iters int, extra map[int][]string) *ncclJob {
	t.Helper()
	job := &ncclJob{segment: NCCLSegment(run, id)}
	t.Cleanup(func() { os.Remove(job.segment) })
	for r := range n {
		p := &ncclProc{done: make(chan struct{})}
		p.cmd = exec.Command(b.NCCLWorkload, "--scenario", "nccl", "--iters", fmt.Sprint(iters))
		p.cmd.Env = append(ncclEnv("SIM_NCCL_RUN="+run, fmt.Sprintf("SIM_NCCL_ID=%#x", id),
			fmt.Sprintf("SIM_NCCL_NRANKS=%d", n), fmt.Sprintf("SIM_NCCL_RANK=%d", r)), extra[r]...)
		p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
		if err := p.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			p.err = p.cmd.Wait()
			close(p.done)
		}()
		t.Cleanup(func() {
			p.cmd.Process.Kill()
			<-p.done
		})
		job.ranks = append(job.ranks, p)
	}
	return job
}

// reports waits for every rank to finish and returns their reports.
func (job *ncclJob) reports(t *testing.T) []*Report {
	t.Helper()
	var reps []*Report
	for r, p := range job.ranks {
		<-p.done
		if p.err != nil {
			t.Fatalf("rank %d: %v\n%s", r, p.err, p.stderr.String())
		}
		rep, err := ParseReport(p.stdout.Bytes())
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		reps = append(reps, rep)
	}
	return reps
}

// running fails the test if a rank has exited.
func (job *ncclJob) running(t *testing.T) {
	t.Helper()
	for r, p := range job.ranks {
		select {
		case <-p.done:
			t.Fatalf("rank %d exited (%v)\n%s%s", r, p.err, p.stdout.String(), p.stderr.String())
		default:
		}
	}
}

// TestNCCLStraggler: ranks of one job in processes of their own, the last
// one sleeping 20 ms before each of its collective calls. The others wait
// for it: their hosts block, in the synchronizing calls after their
// collectives, about as long as it slept.
func TestNCCLStraggler(t *testing.T) {
	b := build(t)
	const iters, delay = 5, 20 * time.Millisecond
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			late := n - 1
			job := startJob(t, b, newRun(), 0x5ee0+uint64(n), n, iters,
				map[int][]string{late: {fmt.Sprintf("SIM_NCCL_DELAY_US=%d", delay.Microseconds())}})
			reps := job.reports(t)
			// It sleeps before each all-reduce and before the closing group.
			slept := (iters + 1) * delay
			for r, rep := range reps {
				assertCalls(t, fmt.Sprintf("rank %d", r), rep.Calls, ncclCalls(iters))
				if r == late {
					continue
				}
				if waited := time.Duration(rep.MeetingWaitNs); waited < slept/2 || waited <= time.Duration(reps[late].MeetingWaitNs) {
					t.Errorf("rank %d waited %v for the others, the late rank %v; want at least half of the %v it slept, and more than it",
						r, waited, time.Duration(reps[late].MeetingWaitNs), slept)
				}
			}
			if _, err := os.Stat(job.segment); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the job's segment after every rank destroyed its communicator: %v, want it removed", err)
			}
		})
	}
}

// TestNCCLHang: a rank stops arriving after 2 collectives (SIM_NCCL_STOP_AFTER)
// and the others, having made all their all-reduces, block on meeting 3
// until killed. A new run of the job then starts over the segment the
// killed one left behind.
func TestNCCLHang(t *testing.T) {
	b := build(t)
	const iters, stopAfter = 5, 2
	for _, n := range []int{2, 3} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			run, id, hung := newRun(), 0x5ef0+uint64(n), n-1
			job := startJob(t, b, run, id, n, iters, map[int][]string{hung: {fmt.Sprintf("SIM_NCCL_STOP_AFTER=%d", stopAfter)}})
			blocked := func(ranks []NCCLRank) bool {
				for r, k := range ranks {
					if r == hung && k.Arrived != stopAfter || r != hung && (k.Arrived != iters || k.BlockedOn != stopAfter+1) {
						return false
					}
				}
				return true
			}
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
				ranks, err := ReadNCCLSegment(job.segment)
				if err == nil && blocked(ranks) {
					break
				}
				job.running(t)
				if time.Now().After(deadline) {
					t.Fatalf("after a minute the job's segment shows %+v (%v)", ranks, err)
				}
			}
			job.running(t)
			for r, p := range job.ranks {
				p.cmd.Process.Kill()
				<-p.done
				ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
				if !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
					t.Errorf("rank %d ended with %v, want killed while blocked", r, p.cmd.ProcessState)
				}
				if _, err := ParseReport(p.stdout.Bytes()); err == nil {
					t.Errorf("rank %d reported: %s", r, p.stdout.String())
				}
			}

			if _, err := os.Stat(job.segment); err != nil {
				t.Fatalf("the killed job left no segment: %v", err)
			}
			again := startJob(t, b, run, id, n, 2, nil)
			for r, rep := range again.reports(t) {
				assertCalls(t, fmt.Sprintf("rank %d of the new run", r), rep.Calls, ncclCalls(2))
			}
		})
	}
}

// TestNCCLAlone: a process that plays one rank of a larger job without the
// job's id (SIM_NCCL_ID) waits for nobody.
func TestNCCLAlone(t *testing.T) {
	b := build(t)
	cmd := exec.Command(b.NCCLWorkload, "--scenario", "nccl", "--iters", "3")
	cmd.Env = ncclEnv("SIM_NCCL_NRANKS=4", "SIM_NCCL_RANK=3")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	rep, err := ParseReport(out)
	if err != nil {
		t.Fatal(err)
	}
	assertCalls(t, "rank 3 of 4", rep.Calls, ncclCalls(3))
	if rep.MeetingWaitNs != 0 {
		t.Errorf("waited %d ns for other ranks", rep.MeetingWaitNs)
	}
}
