package tracer

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cudatap/cudatap/internal/sim"
	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer/event"
	"github.com/cudatap/cudatap/tracer/guard"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/probe"
	"github.com/cudatap/cudatap/tracer/targets"
)

func TestMain(m *testing.M) {
	guard.Init() // the test binary is its sessions' guardian and launcher too
	code := m.Run()
	testutil.CleanupSim()
	os.Exit(code)
}

// specOf finds the API spec of an exact symbol, nil if not hooked at all.
func specOf(sym string) *event.Spec {
	for _, l := range []event.Layer{event.Runtime, event.Driver, event.NCCL} {
		for _, s := range event.Specs(l) {
			for _, x := range s.Symbols {
				if x == sym {
					return s
				}
			}
		}
	}
	return nil
}

// layersOf is the set of layers cudatap found in the process.
func layersOf(out *Outcome, pid int) uint8 {
	var layers uint8
	for _, a := range out.Attached {
		if a.PID == pid {
			for _, l := range a.Libraries {
				layers |= 1 << l.Layer
			}
		}
	}
	return layers
}

// expectedCounts is what cudatap must trace of a workload's report, per
// symbol, for every call but launches: the calls it made and the driver
// calls its runtime made underneath, of the symbols the hook policy probes
// in a process with these layers. Launches are compared as a total (see
// checkCounts).
func expectedCounts(rep *sim.Report, layers uint8) map[string]int {
	want := map[string]int{}
	for _, calls := range []map[string]int{rep.Calls, rep.Internal} {
		for sym, n := range calls {
			if s := specOf(sym); s != nil && s.Class != event.ClassLaunch && targets.PolicyFor(s.Layer, layers).Want(s) {
				want[sym] += n
			}
		}
	}
	return want
}

// launches counts the launch calls in a per-symbol map.
func launches(calls map[string]int) int {
	n := 0
	for sym, k := range calls {
		if s := specOf(sym); s != nil && s.Class == event.ClassLaunch {
			n += k
		}
	}
	return n
}

// countsBySymbol counts the modeled calls per exact symbol.
func countsBySymbol(res *model.Result, pid int) map[string]int {
	got := map[string]int{}
	for _, p := range res.Processes {
		if int(p.PID) != pid {
			continue
		}
		for sym, n := range p.CallCounts() {
			got[sym] += int(n)
		}
	}
	return got
}

// What the tests' sessions concluded, call by call: the session keeps no
// calls, so tests give it a Collector as its sink.
var (
	collectedMu sync.Mutex
	collected   = map[*Outcome]*model.Collector{}
)

// runTraced is Run with a Collector as the sink.
func runTraced(ctx context.Context, cfg Config) (*Outcome, error) {
	col := model.NewCollector()
	cfg.Sink = col
	out, err := Run(ctx, cfg)
	if out != nil {
		collectedMu.Lock()
		collected[out] = col
		collectedMu.Unlock()
	}
	return out, err
}

// traced is a process with every call, sync and GPU op the session
// concluded, and its names.
type traced struct {
	*model.Process
	model.Trace
	names *model.Names
}

// tracedOf is pid's process in out (run by runTraced), nil if not traced.
func tracedOf(t *testing.T, out *Outcome, pid int) *traced {
	t.Helper()
	collectedMu.Lock()
	col := collected[out]
	collectedMu.Unlock()
	if col == nil {
		t.Fatal("outcome not made by runTraced")
	}
	for _, p := range out.Result.Processes {
		if int(p.PID) == pid {
			tp := &traced{Process: p, names: out.Result.Names}
			if tr := col.Traces[p.PID]; tr != nil {
				tp.Trace = *tr
			}
			return tp
		}
	}
	return nil
}

// kernel is the symbol of the kernel launched as f.
func (p *traced) kernel(f uint64) string {
	name, addr := p.KernelSymbol(f)
	if name == "" {
		name = p.names.Kernel(p.PID, addr)
	}
	return name
}

func (p *traced) frame(pc uint64) string       { return p.names.Frame(p.PID, pc) }
func (p *traced) pyFrame(k model.PyKey) string { return p.names.PyFrame(p.PID, k) }

// checkCounts compares the traced calls of the workload's process, symbol by
// symbol, with what the workload made: each launch counted once, nothing
// lost.
func checkCounts(t *testing.T, out *Outcome, rep *sim.Report) {
	t.Helper()
	res := out.Result
	got := countsBySymbol(res, rep.PID)
	want := expectedCounts(rep, layersOf(out, rep.PID))
	// Every launch the workload made (its runtime's through the driver
	// underneath), once, whichever layer counted it.
	if g, w := launches(got), launches(rep.Calls); g != w {
		t.Errorf("launches: traced %d, the workload made %d (%v)", g, w, got)
	}
	for sym, n := range want {
		// Kernel-loading calls may come before libcuda is hooked when
		// attaching to a running process: at most that many.
		if s := specOf(sym); s.Class == event.ClassFuncName && got[sym] <= n {
			continue
		}
		if got[sym] != n {
			t.Errorf("%s: traced %d calls, want %d", sym, got[sym], n)
		}
	}
	for sym, n := range got {
		if s := specOf(sym); s != nil && s.Class == event.ClassLaunch {
			continue
		}
		if _, ok := want[sym]; !ok {
			t.Errorf("%s: traced %d calls the workload never made (or that the policy does not hook)", sym, n)
		}
	}
	// The drop counters are the session's: under --all, host-wide, where
	// another CUDA process (another test run, an agent) may lose a record
	// of its own. They are this workload's only when the session traced
	// nothing else; otherwise the exact counts above are the proof that
	// none of its records was lost.
	if !tracedOnly(res, rep.PID) {
		return
	}
	if lost := res.Drops.Lost(); lost != 0 || res.Drops.ReadFaults != 0 || res.Drops.OrphanReturns != 0 {
		t.Errorf("drops: %+v, want none", res.Drops)
	}
	if res.Drops.Submitted != res.Drops.Received {
		t.Errorf("BPF submitted %d records, user space received %d", res.Drops.Submitted, res.Drops.Received)
	}
}

// tracedOnly reports whether pid is the only process of res with calls.
func tracedOnly(res *model.Result, pid int) bool {
	for _, p := range res.Processes {
		if int(p.PID) != pid && p.NCalls > 0 {
			return false
		}
	}
	return true
}

// libraryPaths lists the files hooked in the first traced process, sorted.
func libraryPaths(out *Outcome) []string {
	var paths []string
	if len(out.Attached) > 0 {
		for _, l := range out.Attached[0].Libraries {
			paths = append(paths, l.Path)
		}
	}
	slices.Sort(paths)
	return paths
}

// launch runs a command under a session to completion.
func launch(t *testing.T, stacks probe.StackMode, args ...string) (*Outcome, *sim.Report) {
	t.Helper()
	return launchWith(t, Config{Command: args, Stacks: stacks, Stderr: os.Stderr, Duration: time.Minute})
}

// launchWith runs cfg's command (a simulated workload) to completion and
// returns the session's outcome and the workload's report.
func launchWith(t *testing.T, cfg Config) (*Outcome, *sim.Report) {
	t.Helper()
	var stdout strings.Builder
	cfg.Stdout = &stdout
	out, err := runTraced(context.Background(), cfg)
	if err != nil {
		t.Fatalf("record %v: %v", cfg.Command, err)
	}
	if out.ExitCode != 0 {
		t.Fatalf("%v exited %d; output:\n%s", cfg.Command, out.ExitCode, stdout.String())
	}
	rep, err := sim.ParseReport([]byte(stdout.String()))
	if err != nil {
		t.Fatal(err)
	}
	return out, rep
}

func TestLaunchEveryAPIExactCounts(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	out, rep := launch(t, probe.StacksSync, b.Workload, "--scenario", "all")
	checkCounts(t, out, rep)
	if libs := libraryPaths(out); !slices.Equal(libs, []string{b.Driver, b.Runtime}) {
		t.Errorf("attached %v, want the runtime and the driver", libs)
	}
	checkViaRuntime(t, tracedOf(t, out, rep.PID), rep)
}

// TestArguments checks decoded argument values against the "all" scenario's
// documented constants.
func TestArguments(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	out, rep := launch(t, probe.StacksNone, b.Workload, "--scenario", "all")
	p := tracedOf(t, out, int(out.Result.Processes[0].PID))
	if int(p.PID) != rep.PID {
		t.Fatalf("process %d, workload says %d", p.PID, rep.PID)
	}
	seen := map[string]bool{}
	for i := range p.Calls {
		c := &p.Calls[i]
		a := c.Args
		sym := c.SymbolName()
		switch sym {
		case "cuLaunchKernel", "cuLaunchCooperativeKernel", "cuLaunchKernelEx":
			// The runtime's launches, counted where they enter the driver.
			// Every "all" launch but the poll target (no shared memory) uses these values.
			if a.Grid == (event.Dim3{X: 7, Y: 3, Z: 2}) && a.Block == (event.Dim3{X: 128, Y: 2, Z: 1}) && a.SharedMem == 4096 {
				seen[sym] = true
			} else if a.SharedMem != 0 {
				t.Errorf("%s: grid %v block %v smem %d", sym, a.Grid, a.Block, a.SharedMem)
			}
			if name := p.kernel(a.Func); !strings.HasPrefix(name, "sim_") {
				t.Errorf("%s: kernel stub %#x named %q, want a sim_*_kernel symbol", sym, a.Func, name)
			}
		case "cudaMemcpyAsync":
			if a.Bytes != 64<<10 || a.Kind != event.HostToDevice {
				t.Errorf("%s: bytes %d kind %v", sym, a.Bytes, a.Kind)
			}
			seen[sym] = true
		case "cudaMemcpy2DAsync":
			if a.Bytes != 256*16 || a.Kind != event.HostToDevice {
				t.Errorf("%s: bytes %d kind %v", sym, a.Bytes, a.Kind)
			}
			seen[sym] = true
		case "cudaStreamCreateWithPriority":
			s := p.Streams[c.Stream]
			if !s.NonBlocking || s.Priority != -1 || s.Kind != model.StreamCreated {
				t.Errorf("%s: stream %+v", sym, s)
			}
			seen[sym] = true
		case "cudaGraphLaunch":
			// The fake handle's, and one of an exec the workload made
			// (its ops are its graph's nodes).
			if a.Ptr != 0x6a6a0001 && (c.GPUOp < 0 || !p.GPUOps[c.GPUOp].InGraph()) {
				t.Errorf("%s: graph %#x", sym, a.Ptr)
			}
			seen[sym] = true
		}
	}
	for _, sym := range []string{"cuLaunchKernel", "cuLaunchCooperativeKernel", "cuLaunchKernelEx", "cudaMemcpyAsync", "cudaMemcpy2DAsync", "cudaStreamCreateWithPriority", "cudaGraphLaunch"} {
		if !seen[sym] {
			t.Errorf("no %s call traced", sym)
		}
	}
}

// TestAttachRunningProcess attaches by PID to a process that is already running.
func TestAttachRunningProcess(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	testAttach(t, exec.Command(b.Workload, "--wait-stdin", "--scenario", "basic", "--iters", "30", "--streams", "3"), func(out *Outcome, rep *sim.Report) {
		p := tracedOf(t, out, int(out.Result.Processes[0].PID))
		// basic: 3 created streams + legacy; syncs of each kind it makes.
		created := 0
		for _, s := range p.Streams {
			if s.Kind == model.StreamCreated {
				created++
			}
		}
		if created != 3 {
			t.Errorf("created streams: %d, want 3", created)
		}
		kinds := map[model.SyncKind]int{}
		for _, s := range p.Syncs {
			kinds[s.Kind]++
		}
		if kinds[model.SyncPageableMemcpy] != 30 || kinds[model.SyncStream] != 3 || kinds[model.SyncDevice] != 1 {
			t.Errorf("sync kinds %v: want 30 pageable copies, 3 stream syncs, 1 device sync", kinds)
		}
		if len(p.Deps) != 30 {
			t.Errorf("dependencies: %d, want 30 record→wait edges", len(p.Deps))
		}
	})
}

// testAttach starts cmd (which prints "ready PID" and waits for a line on
// stdin), attaches, lets it run, and checks counts when it exits.
func testAttach(t *testing.T, cmd *exec.Cmd, check func(*Outcome, *sim.Report)) {
	t.Helper()
	stdin, _ := cmd.StdinPipe()
	stdoutPipe, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	br := bufio.NewReader(stdoutPipe)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "ready ") {
		t.Fatalf("workload did not get ready: %q %v", line, err)
	}
	attached := make(chan struct{})
	type result struct {
		out *Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := runTraced(context.Background(), Config{PIDs: []int{cmd.Process.Pid}, Stacks: probe.StacksSync, Duration: time.Minute, WaitForCUDA: true,
			Observer: Funcs{OnAttached: func(int) { close(attached) }}})
		done <- result{out, err}
	}()
	select {
	case <-attached:
	case r := <-done:
		t.Fatalf("record ended before attaching: %v", r.err)
	}
	fmt.Fprintln(stdin, "go")
	rest, _ := io.ReadAll(br)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("workload: %v\n%s", err, rest)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	rep, err := sim.ParseReport(rest)
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, r.out, rep)
	if check != nil {
		check(r.out, rep)
	}
}

// TestStaticRuntime traces an executable with the runtime linked in (symbols
// only in .symtab).
func TestStaticRuntime(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	out, rep := launch(t, probe.StacksSync, b.StaticWorkload, "--scenario", "basic", "--iters", "20")
	checkCounts(t, out, rep)
	if libs := libraryPaths(out); !slices.Equal(libs, []string{b.Driver, b.StaticWorkload}) {
		t.Errorf("attached %v, want the static executable and the driver", libs)
	}
	for _, l := range out.Attached[0].Libraries {
		if l.Layer == event.Runtime && !l.Static {
			t.Errorf("the runtime in %s was not found through .symtab", l.Path)
		}
	}
}

// TestHashedLibraryLoadedLate traces a vendored runtime with a hashed name
// that the process dlopen()s after it started.
func TestHashedLibraryLoadedLate(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	out, rep := launch(t, probe.StacksSync, b.DlopenWorkload, "--dlopen", b.HashedRuntime, "--sleep-ms", "50", "--scenario", "all")
	checkCounts(t, out, rep)
	if libs := libraryPaths(out); !slices.Equal(libs, []string{b.Driver, b.HashedRuntime}) {
		t.Errorf("attached %v, want %s and the driver", libs, b.HashedRuntime)
	}
}

// TestOtherMountNamespace attaches to a process whose runtime lives at a
// path that exists only inside its own mount namespace.
func TestOtherMountNamespace(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare not installed")
	}
	b := testutil.Sim(t)
	dir := t.TempDir() // a tmpfs inside the workload's mount namespace
	script := fmt.Sprintf(`mkdir -p %[1]s && mount -t tmpfs none %[1]s && cp %[2]s %[3]s %[4]s %[1]s/ && exec %[1]s/workload --wait-stdin --scenario basic --iters 10`,
		dir, b.Workload, b.Runtime, b.Driver)
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", script)
	testAttach(t, cmd, func(out *Outcome, _ *sim.Report) {
		// libcuda is loaded at the first call; the short workload may be
		// gone before it is hooked (its launches are then counted in the
		// runtime).
		libs := libraryPaths(out)
		if !slices.Equal(libs, []string{dir + "/libcuda.so.1", dir + "/libcudart.so.13"}) && !slices.Equal(libs, []string{dir + "/libcudart.so.13"}) {
			t.Errorf("attached %v", libs)
		}
		if _, err := os.Stat(dir + "/libcudart.so.13"); err == nil {
			t.Errorf("%s is visible on the host: the test proves nothing", dir)
		}
	})
}

// TestNoCUDA explains which mappings were searched.
func TestNoCUDA(t *testing.T) {
	testutil.RequireRoot(t)
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// Start returns once sleep has been executed: its mappings are sleep's.
	_, err := Run(context.Background(), Config{PIDs: []int{cmd.Process.Pid}})
	if err == nil || !strings.Contains(err.Error(), "no CUDA") || !strings.Contains(err.Error(), "searched") {
		t.Fatalf("err = %v, want a no-CUDA error listing the searched mappings", err)
	}
}

func TestNoSuchProcess(t *testing.T) {
	_, err := Run(context.Background(), Config{PIDs: []int{1 << 30}})
	if err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("err = %v", err)
	}
}

// TestDriverAndNCCL: a driver-only program (like Triton), the runtime on top
// of the driver with direct driver calls too, and NCCL collectives on a comm
// stream: every call counted once, launches once whichever layer.
func TestDriverAndNCCL(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"driver", []string{b.DriverWorkload, "--scenario", "driver", "--iters", "20"}},
		{"driver-all", []string{b.DriverWorkload, "--scenario", "driver-all"}},
		{"mixed", []string{b.DriverWorkload, "--scenario", "mixed", "--iters", "10"}},
		{"nccl", []string{b.NCCLWorkload, "--scenario", "nccl", "--iters", "10"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("SIM_NCCL_RANK", "3") // the nccl workload plays rank 3 of 4
			t.Setenv("SIM_NCCL_NRANKS", "4")
			out, rep := launch(t, probe.StacksSync, tc.args...)
			checkCounts(t, out, rep)
			p := tracedOf(t, out, rep.PID)
			checkViaRuntime(t, p, rep)
			switch tc.name {
			case "driver":
				// Triton-style kernels are named from cuModuleGetFunction /
				// cuLibraryGetKernel.
				names := map[string]bool{}
				for _, op := range p.GPUOps {
					if op.Kind == model.OpKernel {
						names[p.kernel(op.Func)] = true
					}
				}
				if !names["triton_matmul_kernel"] || !names["triton_softmax_kernel"] {
					t.Errorf("driver kernels named %v", names)
				}
			case "nccl":
				var bytes uint64
				var n int64
				comm := map[int32]bool{}
				for i := range p.Calls {
					c := &p.Calls[i]
					if c.API == event.NcclAllReduce {
						bytes += c.Args.Bytes
						comm[c.Stream] = true
					}
				}
				for _, s := range p.Streams {
					n += s.Stats.Collectives
				}
				if bytes != 10*25<<20 {
					t.Errorf("all-reduce bytes %d, want 10 × 25 MiB", bytes)
				}
				if len(comm) != 1 {
					t.Errorf("all-reduces on streams %v, want one comm stream", comm)
				}
				if commNs, _ := model.CommOverlap(p.Process); commNs == 0 || n < 16 {
					t.Errorf("collectives %d, inferred communication time %d ns", n, commNs)
				}
				// The rank and world size the workload passed (SIM_NCCL_*).
				if p.Rank != 3 || p.WorldSize != 4 {
					t.Errorf("rank %d of %d, want 3 of 4 (ncclCommInitRank)", p.Rank, p.WorldSize)
				}
			}
		})
	}
}

// TestPerSymbolUprobes: the fallback for kernels without uprobe_multi (one
// perf-event uprobe per symbol, cookies included) traces the same calls.
func TestPerSymbolUprobes(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	var stdout strings.Builder
	out, err := Run(context.Background(), Config{Command: []string{b.Workload, "--scenario", "basic", "--iters", "20"},
		Stacks: probe.StacksSync, PerSymbolUprobes: true, NVMLInterval: -1, Stdout: &stdout, Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := sim.ParseReport([]byte(stdout.String()))
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, out, rep)
}

// TestStackNearStackTop: syncs made a few hundred bytes below the top of
// their stack (the next page unmapped) still carry a stack copy, so they
// unwind to the function that made them.
func TestStackNearStackTop(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	out, rep := launchUntilSyncs(t, probe.StacksSync, 10, b.Workload, "--scenario", "stacktop", "--iters", "5")
	p := tracedOf(t, out, rep.PID)
	n := 0
	for _, s := range p.Syncs {
		if s.Kind != model.SyncStream && s.Kind != model.SyncDevice {
			continue
		}
		n++
		var frames []string
		if s.Stack >= 0 {
			for _, pc := range p.Stacks[s.Stack] {
				frames = append(frames, p.frame(pc))
			}
		}
		if !slices.ContainsFunc(frames, func(f string) bool { return strings.HasPrefix(f, "stacktop_sync") }) {
			t.Errorf("%s: native stack %q does not reach stacktop_sync", s.Kind, frames)
		}
	}
	if n != 10 {
		t.Errorf("%d stream and device syncs, want 10", n)
	}
}

// launchUntilSyncs runs a command (a simulated workload, which is given
// --wait-before-exit) under a session and lets it exit only once the model
// has seen n synchronizations: its stacks are then named while it lives,
// however loaded the machine.
func launchUntilSyncs(t *testing.T, stacks probe.StackMode, n int64, args ...string) (*Outcome, *sim.Report) {
	t.Helper()
	return launchUntilSyncsWith(t, Config{Command: args, Stacks: stacks}, n)
}

// launchUntilSyncsWith is launchUntilSyncs for cfg's command, stacks and
// GPU times.
func launchUntilSyncsWith(t *testing.T, cfg Config, n int64) (*Outcome, *sim.Report) {
	t.Helper()
	pr, pw := io.Pipe()
	cfg.Command = append(cfg.Command, "--wait-before-exit")
	cfg.Stdin, cfg.Stderr, cfg.Duration, cfg.NVMLInterval = pr, os.Stderr, time.Minute, -1
	onLive := func(snapshot func() []model.StreamSnap) {
		go func() {
			defer pw.Close()
			for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				var seen int64
				for _, st := range snapshot() {
					seen += st.Syncs
				}
				if seen >= n {
					break
				}
			}
			fmt.Fprintln(pw, "exit")
		}()
	}
	cfg.Observer = Funcs{OnLive: onLive}
	return launchWith(t, cfg)
}

// TestDevices: work goes to the device it ran on (cudaSetDevice, per
// thread; a created stream keeps its device), in launch mode, and in a
// process cudatap attached to after it chose its device.
func TestDevices(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	count := func(p *traced) map[int8]int {
		n := map[int8]int{}
		for _, op := range p.GPUOps {
			n[op.Device]++
		}
		return n
	}
	out, rep := launch(t, probe.StacksNone, b.Workload, "--scenario", "devices", "--iters", "5")
	checkCounts(t, out, rep)
	if got, want := count(tracedOf(t, out, rep.PID)), map[int8]int{0: 15, 1: 20}; !maps.Equal(got, want) {
		t.Errorf("ops by device %v, want %v", got, want)
	}
}

// TestBusyBounds: without kernel timings, each stream's GPU busy time is
// bounded from above, and the simulated GPU's modeled busy time is within
// the bound, stream by stream, in every scenario.
func TestBusyBounds(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	for _, scenario := range []string{"basic", "launches", "ptsz", "timing", "all"} {
		t.Run(scenario, func(t *testing.T) {
			out, rep := launch(t, probe.StacksNone, b.Workload, "--scenario", scenario, "--iters", "20")
			p := tracedOf(t, out, rep.PID)
			if len(rep.BusyNs) == 0 {
				t.Fatal("the workload reported no busy times")
			}
			for handle, busy := range rep.BusyNs {
				s := streamOfHandle(t, p, handle)
				if s == nil {
					if busy > 0 {
						t.Errorf("stream %s: %d ns of GPU work, not traced", handle, busy)
					}
					continue
				}
				st := s.Stats
				if uint64(busy) > st.BusyMaxNs {
					t.Errorf("%s: modeled busy %d ns above the bound %d", s.Label(), busy, st.BusyMaxNs)
				}
				t.Logf("%s: busy %d ns, at most %d", s.Label(), busy, st.BusyMaxNs)
			}
		})
	}
}

// streamOfHandle finds the stream a workload's report names: "0x…" (0: the
// legacy stream), or "ptds:TID" for a thread's per-thread default stream.
func streamOfHandle(t *testing.T, p *traced, handle string) *model.Stream {
	t.Helper()
	var match func(*model.Stream) bool
	if tid, ok := strings.CutPrefix(handle, "ptds:"); ok {
		match = func(c *model.Stream) bool {
			return c.Kind == model.StreamPerThread && strconv.Itoa(int(c.OwnerTID)) == tid
		}
	} else {
		h, err := strconv.ParseUint(strings.TrimPrefix(handle, "0x"), 16, 64)
		if err != nil {
			t.Fatalf("handle %q: %v", handle, err)
		}
		match = func(c *model.Stream) bool {
			return (h == 0 && c.Kind == model.StreamLegacy) || (h != 0 && c.Handle == h && c.Kind != model.StreamPerThread)
		}
	}
	var s *model.Stream
	for _, c := range p.Streams {
		if match(c) {
			s = c
		}
	}
	return s
}

// checkViaRuntime: launches counted in the driver are told apart by their
// caller, per API: those the runtime made (called, or tail-called as
// cudaLaunchKernelExC does) are the program's runtime launches, the others
// its own driver launches (Triton-style).
func checkViaRuntime(t *testing.T, p *traced, rep *sim.Report) {
	t.Helper()
	got, want := map[string]int{}, map[string]int{}
	for i := range p.Calls {
		c := &p.Calls[i]
		s := c.Spec()
		if s == nil || s.Class != event.ClassLaunch {
			continue
		}
		if rt := event.Lookup(event.RuntimeLaunch(c.API)); c.ViaRuntime && rt != nil {
			s = rt
		}
		got[s.Name]++
	}
	for sym, n := range rep.Calls {
		if s := specOf(sym); s != nil && s.Class == event.ClassLaunch {
			want[s.Name] += n
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("launches by the API the program called: %v, the workload made %v", got, want)
	}
}
