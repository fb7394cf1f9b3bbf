package perfetto

import (
	"testing"

	"github.com/cudatap/cudatap/export/internal/fixture"
)

// TestGraphNodes: as in the Chrome trace, each launch of a captured graph
// draws one kernel per node with its node and capture site, and one flow
// per launch, from the launch call to its first node.
func TestGraphNodes(t *testing.T) {
	tr, events, _, _ := writeBoth(t, fixture.Graph())
	for _, p := range tr.Problems {
		t.Error(p)
	}
	chromeKernels := 0
	for _, ev := range events {
		if ev["ph"] == "X" && ev["cat"] == "kernel" {
			chromeKernels++
		}
	}
	kernels, flowEnds := 0, 0
	for i := range tr.Slices {
		s := &tr.Slices[i]
		flowEnds += len(s.Terminating)
		if s.Category != "kernel" {
			continue
		}
		kernels++
		if _, ok := s.Args["graph_node"]; !ok || s.Args["captured_by"] != "cuLaunchKernel" || s.Args["capture_stack"] == nil {
			t.Errorf("kernel %q args %v: want graph_node, captured_by, capture_stack", s.Name, s.Args)
		}
	}
	want := fixture.GraphLaunches * fixture.GraphNodes
	if kernels != want || chromeKernels != want || flowEnds != fixture.GraphLaunches {
		t.Errorf("%d kernels (Chrome: %d), %d flows ended; want %d kernels in both, %d flows (one per launch)",
			kernels, chromeKernels, flowEnds, want, fixture.GraphLaunches)
	}
}
