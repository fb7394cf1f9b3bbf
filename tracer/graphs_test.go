package tracer

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/probe"
)

// graphKernel is a node as a test expects it: its kernel's name and grid
// (the simulated GPU runs it 1 µs per block).
type graphKernel struct {
	name   string
	blocks uint32
}

// graphLaunches is what the graphs scenarios replay, launch by launch:
// iters times each of the blocks.
func graphLaunches(iters int, blocks ...[]graphKernel) [][]graphKernel {
	var out [][]graphKernel
	for _, b := range blocks {
		for range iters {
			out = append(out, b)
		}
	}
	return out
}

const graphIters = 10

var (
	gemm, relu, reduce = "sim_gemm_kernel", "sim_relu_kernel", "sim_reduce_kernel"
	// scenario graphs: the capture, the update to the second capture and
	// its re-instantiation, the graph built by hand, and it once its
	// second node's kernel was set.
	runtimeGraphs = graphLaunches(graphIters,
		[]graphKernel{{gemm, 20}, {relu, 4}, {reduce, 8}, {gemm, 16}, {relu, 2}},
		[]graphKernel{{gemm, 40}, {relu, 3}, {reduce, 9}, {gemm, 12}, {relu, 1}},
		[]graphKernel{{gemm, 40}, {relu, 3}, {reduce, 9}, {gemm, 12}, {relu, 1}},
		[]graphKernel{{gemm, 10}, {relu, 5}, {reduce, 3}},
		[]graphKernel{{gemm, 10}, {reduce, 6}, {reduce, 3}})
	matmul, softmax, memset = "triton_matmul_kernel", "triton_softmax_kernel", "Memset"
	// scenario driver-graphs, likewise (the memset node: 64 KiB).
	driverGraphs = graphLaunches(graphIters,
		[]graphKernel{{matmul, 20}, {softmax, 4}, {memset, 0}, {matmul, 8}},
		[]graphKernel{{matmul, 30}, {softmax, 5}, {memset, 0}, {matmul, 2}},
		[]graphKernel{{softmax, 3}, {matmul, 7}},
		[]graphKernel{{matmul, 9}, {matmul, 7}})
)

// TestGraphReplays: every launch of a graph the workload captured (on a
// stream, with a fork to a side stream and back; through the runtime and
// through the driver) or built by hand shows its nodes as GPU ops, in node
// order, named as their kernels, each with the call that captured or added
// it (its stack); updates (cudaGraphExecUpdate, a node's kernel set in the
// exec) and re-instantiation are followed. Without GPU times each op is
// bounded inside its launch's bounds, in node order; with them each is
// measured by its node's CUPTI record: exactly its modeled time, nothing
// unmatched or unmeasured.
func TestGraphReplays(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	for _, tc := range []struct {
		name     string
		args     []string
		launches [][]graphKernel
		syncs    int64
		site     string // the function whose calls captured the nodes
		cupti    string // the CUPTI to use (a process without a runtime: none is found beside it)
	}{
		{"runtime", []string{b.Workload, "--scenario", "graphs"}, runtimeGraphs, 4, "capture_node", ""},
		{"driver", []string{b.DriverWorkload, "--scenario", "driver-graphs"}, driverGraphs, 3, "driver_capture", b.CUPTI},
	} {
		for _, gpuTimes := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/gpu-times=%v", tc.name, gpuTimes), func(t *testing.T) {
				args := append(slices.Clone(tc.args), "--iters", fmt.Sprint(graphIters))
				// Stacks as record takes them by default (on calls that may
				// block): a launch made while a graph is captured has one
				// all the same.
				out, rep := launchUntilSyncsWith(t, Config{Command: args, Stacks: probe.StacksSync, GPUTimes: gpuTimes, CUPTIPath: tc.cupti}, tc.syncs)
				checkCounts(t, out, rep)
				p := tracedOf(t, out, rep.PID)
				checkGraphOps(t, p, tc.launches, tc.site, tc.name == "runtime", gpuTimes)
				d := out.Result.Drops
				if d.Limits.Graphs != 0 || d.GPUTimesUnmatched+d.GPUTimesLate+d.GPUTimesUnmeasured+d.GPUTimesLost != 0 {
					t.Errorf("graphs not followed %d; GPU times unmatched %d late %d unmeasured %d lost %d: want none",
						d.Limits.Graphs, d.GPUTimesUnmatched, d.GPUTimesLate, d.GPUTimesUnmeasured, d.GPUTimesLost)
				}
				// Every op ran on the launch stream: its busy time is the
				// modeled one, exactly when measured, else within the bound.
				for handle, busy := range rep.BusyNs {
					s := streamOfHandle(t, p, handle)
					if s == nil {
						if busy > 0 {
							t.Errorf("stream %s: %d ns of GPU work, not traced", handle, busy)
						}
						continue
					}
					st := s.Stats
					if gpuTimes && (uint64(busy) != st.BusyNs || st.BusyNs != st.BusyMaxNs) {
						t.Errorf("%s: busy [%d, %d] ns, modeled %d: want exactly the modeled time", s.Label(), st.BusyNs, st.BusyMaxNs, busy)
					}
					if !gpuTimes && uint64(busy) > st.BusyMaxNs {
						t.Errorf("%s: busy at most %d ns, modeled %d", s.Label(), st.BusyMaxNs, busy)
					}
				}
			})
		}
	}
}

// checkGraphOps checks p's graph launches, in call order, against want:
// their ops, per launch, in node order.
// runtime: the program called the runtime, as each node's call must say.
func checkGraphOps(t *testing.T, p *traced, want [][]graphKernel, site string, runtime, measured bool) {
	t.Helper()
	byCorr := map[uint64][]*model.GPUOp{}
	for i := range p.GPUOps {
		if op := &p.GPUOps[i]; op.ID >= 0 && op.InGraph() {
			byCorr[op.Correlation] = append(byCorr[op.Correlation], op)
		} else if op.ID >= 0 && op.Kind == model.OpGraph {
			t.Errorf("op %d: a graph launch not expanded", op.ID)
		}
	}
	var launches, syncs []*model.Call
	for i := range p.Calls {
		switch c := &p.Calls[i]; {
		case strings.Contains(c.API.String(), "GraphLaunch"):
			launches = append(launches, c)
		case c.Sync == model.SyncStream:
			syncs = append(syncs, c)
		}
	}
	if len(launches) != len(want) {
		t.Fatalf("%d graph launches traced, want %d", len(launches), len(want))
	}
	total := 0
	stacks := map[int32]bool{}
	for l, c := range launches {
		if c.Stack >= 0 {
			t.Errorf("launch %d (call %d) has a stack: taken outside a capture", l, c.Seq)
		}
		ops := byCorr[c.Correlation]
		total += len(ops)
		// The sync after the launch bounds its ops.
		bound := uint64(0)
		if i := slices.IndexFunc(syncs, func(s *model.Call) bool { return s.Start > c.Start }); i >= 0 {
			bound = syncs[i].End
		}
		if len(ops) != len(want[l]) || (len(ops) > 0 && c.GPUOp != ops[0].ID) {
			t.Fatalf("launch %d (call %d): %d ops, the call's op %d; want %d, the first its", l, c.Seq, len(ops), c.GPUOp, len(want[l]))
		}
		prevEnd := uint64(0)
		for k, op := range ops {
			w := want[l][k]
			name := p.kernel(op.Func)
			if op.Kind == model.OpMemset {
				name = "Memset"
			}
			if name != w.name || (w.blocks != 0 && op.Grid.X != w.blocks) {
				t.Errorf("launch %d node %d: %s grid %d, want %s grid %d", l, k, name, op.Grid.X, w.name, w.blocks)
			}
			n := p.NodeOf(op)
			if n == nil || n.Index != int32(k) {
				t.Fatalf("launch %d node %d: node %+v, want the node's call", l, k, n)
			}
			made := &p.Calls[n.Call]
			if !made.Captured && !strings.Contains(made.API.String(), "AddKernelNode") {
				t.Errorf("launch %d node %d: made by %s (call %d), not captured nor added", l, k, made.API, made.Seq)
			}
			if strings.HasPrefix(n.API.String(), "cuda") != runtime {
				t.Errorf("launch %d node %d: made by %s, want the %s API the program called", l, k, n.API, map[bool]string{true: "runtime", false: "driver"}[runtime])
			}
			if made.Captured {
				stacks[n.Stack] = true
				if !slices.ContainsFunc(p.framesOf(n.Stack), func(f string) bool { return strings.HasPrefix(f, site) }) {
					t.Errorf("launch %d node %d: capture stack %q does not reach %s", l, k, p.framesOf(n.Stack), site)
				}
			}
			switch {
			case measured:
				if !op.Measured || (w.blocks != 0 && op.End-op.Start != uint64(w.blocks)*1000) {
					t.Errorf("launch %d node %d: measured %v [%d, %d], want %d µs", l, k, op.Measured, op.Start, op.End, w.blocks)
				}
			case op.Measured || !op.Bounded || op.Start < c.Start || op.Start < prevEnd || op.End > bound:
				t.Errorf("launch %d node %d: [%d, %d] bounded %v; want bounded in the launch's bounds [%d, %d], after node %d",
					l, k, op.Start, op.End, op.Bounded, c.Start, bound, k-1)
			}
			prevEnd = op.End
		}
	}
	t.Logf("%d graph launches ran %d ops; %d distinct capture stacks", len(launches), total, len(stacks))
	if n := len(want[0]); len(stacks) < n {
		t.Errorf("%d distinct capture stacks, want at least %d (one per captured node's line)", len(stacks), n)
	}
}

// framesOf names the native frames of stack i, innermost first.
func (p *traced) framesOf(i int32) []string {
	if i < 0 || int(i) >= len(p.Stacks) {
		return nil
	}
	var out []string
	for _, pc := range p.Stacks[i] {
		out = append(out, p.frame(pc))
	}
	return out
}
