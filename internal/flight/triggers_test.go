package flight

import (
	"strings"
	"testing"

	"github.com/cudatap/cudatap/export/oom"
	"github.com/cudatap/cudatap/internal/testutil"
)

// TestOOMDump: the simulated job that runs out of device memory (scenario
// oom: 1004 MiB held at four places, 2 GiB asked twice, then it recovers)
// under the flight recorder makes exactly one dump, "oom": its window holds
// every call the job made (it fits), its report leads with the trigger
// and then the failure, which names the holders and says it recovered.
func TestOOMDump(t *testing.T) {
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	r := newRecorder(t, Options{})
	tr := runUnder(t, r, "", b.Workload, "--scenario", "oom")
	ds := dumps(t, r)
	if len(ds) != 1 || ds[0].flight.Trigger != "oom" {
		t.Fatalf("dumps %+v, want one oom", ds)
	}
	d := ds[0]
	if d.flight.PID != uint32(tr.rep.PID) || d.flight.Dropped != 0 || d.flight.Restated != 0 {
		t.Errorf("flight header %+v", d.flight)
	}
	checkWholeRun(t, d, tr)
	if !strings.HasPrefix(d.rep.Summary, "flight recorder, trigger oom: cudaMalloc of 2.0 GiB failed (out of memory)") {
		t.Errorf("the report does not lead with the trigger:\n%s", d.rep.Summary)
	}
	if f := d.rep.Findings; len(f) < 2 || !strings.HasPrefix(f[0].Title, "flight recorder, trigger oom") || !strings.HasPrefix(f[1].Title, "out of memory: ") {
		t.Errorf("findings %+v", f)
	}
	recs := oom.Records(d.res)
	if len(recs) != 1 || !recs[0].Recovered || len(recs[0].Holders) < 3 {
		t.Errorf("out-of-memory records %+v, want one, recovered, with its holders", recs)
	}
	if s := r.Stats(); s.Dumps["oom"] != 1 || s.Failures != 0 {
		t.Errorf("stats %+v", s)
	}
}
