package report

import (
	"strings"
	"testing"

	"github.com/cudatap/cudatap/export/internal/fixture"
)

// TestSummaryGraphs: the ops of graph launches count among the stream's
// GPU ops, one per node per launch, and a line says so.
func TestSummaryGraphs(t *testing.T) {
	out := summary(t, fixture.Graph(), Options{})
	if want := "CUDA graphs: 3 launches ran 6 GPU ops (their nodes: in GPU OPS, not in LAUNCHES)"; !strings.Contains(out, want) {
		t.Errorf("summary lacks %q:\n%s", want, out)
	}
}
