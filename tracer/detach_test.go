package tracer

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cudatap/cudatap/internal/testutil"
	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/probe"
)

// cancelAfter is a sink that cancels the session once it has seen n calls.
type cancelAfter struct {
	model.Discard
	n      int
	cancel context.CancelFunc
}

func (c *cancelAfter) Call(*model.Process, *model.Call) {
	if c.n--; c.n == 0 {
		c.cancel()
	}
}

// TestDetachLeavesNoOrphans stops a recording while the target keeps making
// return-probed calls (pageable copies, stream syncs) as fast as it can:
// every return seen must have its entry. Closing the entry probes before
// the return probes left a window, milliseconds long per link, in which
// each call came back as a return without its entry (390–589 per stop in
// the review, thousands on the per-symbol path).
func TestDetachLeavesNoOrphans(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	b := testutil.Sim(t)
	for _, perSymbol := range []bool{false, true} {
		name := "uprobe_multi"
		if perSymbol {
			name = "per-symbol"
		}
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(b.Workload, "--wait-stdin", "--scenario", "basic", "--iters", "100000000", "--streams", "2")
			stdin, _ := cmd.StdinPipe()
			stdout, _ := cmd.StdoutPipe()
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Wait()
			defer cmd.Process.Kill()
			if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || !strings.HasPrefix(line, "ready ") {
				t.Fatalf("workload did not get ready: %q %v", line, err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			sink := &cancelAfter{n: 5000, cancel: cancel}
			out, err := Run(ctx, Config{PIDs: []int{cmd.Process.Pid}, Stacks: probe.StacksNone, PerSymbolUprobes: perSymbol,
				NVMLInterval: -1, Duration: 5 * time.Minute, Sink: sink,
				Observer: Funcs{OnAttached: func(int) { stdin.Write([]byte("go\n")) }}})
			if err != nil {
				t.Fatal(err)
			}
			if sink.n > 0 {
				t.Fatalf("the session ended after %d calls, before the stop under test", 5000-sink.n)
			}
			d := out.Result.Drops
			if d.OrphanReturns != 0 || d.Lost() != 0 {
				t.Errorf("drops after a stop during calls: %+v, want no orphan returns and nothing lost", d)
			}
		})
	}
}
