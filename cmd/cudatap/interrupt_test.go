package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/export/merge/mergetest"
)

// TestReplayInterrupted: a command that reads a recording and is stopped
// by a signal (its context ended, as main's signal.NotifyContext ends it)
// stops reading, writes none of its outputs, says so and exits 130.
func TestReplayInterrupted(t *testing.T) {
	dir := t.TempDir()
	ins := mergetest.ThreeHosts().Write(t, dir)
	out := func(name string) string { return filepath.Join(dir, name) }
	for _, args := range [][]string{
		{"export", ins[0], "-o", out("export.json"), "-o", out("export.pb.gz")},
		{"report", ins[0], "-o", out("report.html")},
		{"lint", ins[0]},
		{"syncs", ins[0]},
		{"merge", ins[0], ins[1], "-o", out("merged.json"), "-o", out("merged.cudatap")},
	} {
		t.Run(args[0], func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // the signal came before the first read: deterministic
			var stdout, stderr bytes.Buffer
			root := newRootCmd()
			root.SetArgs(args)
			root.SetOut(&stdout)
			root.SetErr(&stderr)
			err := root.ExecuteContext(ctx)
			if code := exitCode(err); code != exitInterrupted || !strings.Contains(err.Error(), args[0]+" interrupted by a signal") {
				t.Fatalf("exit %d, err %v; want %d and what was interrupted\n%s", code, err, exitInterrupted, stderr.String())
			}
			if strings.Contains(stderr.String(), "wrote ") {
				t.Errorf("an interrupted %s says it wrote:\n%s", args[0], stderr.String())
			}
		})
	}
	left, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range left {
		if !slices.Contains(ins, p) {
			t.Errorf("%s left behind by an interrupted command", p)
		}
	}
	if _, err := os.Stat(ins[0]); err != nil {
		t.Errorf("the input: %v", err)
	}
}
