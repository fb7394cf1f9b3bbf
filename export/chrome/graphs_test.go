package chrome

import (
	"fmt"
	"testing"

	"github.com/cudatap/cudatap/export/internal/fixture"
)

// TestGraphNodes: each launch of a captured graph draws one kernel per
// node, with its node's index and capture site, the launch's correlation
// id, and one ac2g arrow per launch (to its first node).
func TestGraphNodes(t *testing.T) {
	tf, _ := write(t, fixture.Graph(), Options{})
	kernels := find(tf, func(ev map[string]any) bool { return ev["ph"] == "X" && ev["cat"] == "kernel" })
	if len(kernels) != fixture.GraphLaunches*fixture.GraphNodes {
		t.Fatalf("%d kernel slices, want %d (%d nodes × %d launches)", len(kernels),
			fixture.GraphLaunches*fixture.GraphNodes, fixture.GraphNodes, fixture.GraphLaunches)
	}
	byCorr := map[int64][]int64{}
	for _, k := range kernels {
		a := args(k)
		node := integer(t, a["graph_node"])
		want := fmt.Sprintf("%#x", fixture.GraphFrame+0x1000*(node+1))
		if st, ok := a["capture_stack"].([]any); !ok || len(st) != 1 || st[0] != want || a["captured_by"] != "cuLaunchKernel" {
			t.Errorf("node %d: capture stack %v by %v, want [%s] by cuLaunchKernel", node, a["capture_stack"], a["captured_by"], want)
		}
		c := integer(t, a["correlation"])
		byCorr[c] = append(byCorr[c], node)
	}
	if len(byCorr) != fixture.GraphLaunches {
		t.Errorf("kernels carry %d correlation ids, want one per launch (%d)", len(byCorr), fixture.GraphLaunches)
	}
	starts := find(tf, func(ev map[string]any) bool { return ev["ph"] == "s" && ev["cat"] == "ac2g" })
	finishes := find(tf, func(ev map[string]any) bool { return ev["ph"] == "f" && ev["cat"] == "ac2g" })
	if len(starts) != fixture.GraphLaunches || len(finishes) != fixture.GraphLaunches {
		t.Errorf("%d ac2g starts and %d finishes, want %d each: one arrow per launch", len(starts), len(finishes), fixture.GraphLaunches)
	}
}
