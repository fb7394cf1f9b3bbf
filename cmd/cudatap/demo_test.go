package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/internal/testutil"
)

// TestDemoWritesWhatItPointsTo: the demo writes a recording, an HTML report,
// a trace and a profile into its directory, and every command it ends with
// runs as printed and reads them.
func TestDemoWritesWhatItPointsTo(t *testing.T) {
	t.Parallel()
	testutil.RequireRoot(t)
	dir := filepath.Join(t.TempDir(), "the demo's files") // the commands must quote it
	stdout, stderr, err := run(t, "demo", "--iters", "10", "--out-dir", dir)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, stderr)
	}
	files := newDemoFiles(dir)
	for _, f := range []string{files.recording, files.report, files.trace, files.profile} {
		if fi, err := os.Stat(f); err != nil || fi.Size() == 0 {
			t.Errorf("demo did not write %s: %v", f, err)
		}
		if !strings.Contains(stdout, f) {
			t.Errorf("demo's last lines do not name %s:\n%s", f, stdout)
		}
	}
	if page, _ := os.ReadFile(files.report); !strings.Contains(string(page), "<html") {
		t.Errorf("%s is no HTML page", files.report)
	}

	// The commands it prints, as a shell would split them.
	prefix := "  " + shellWord(os.Args[0]) + " "
	ran := map[string]bool{}
	for _, line := range strings.Split(stdout, "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		args := shellSplit(t, strings.TrimSpace(strings.SplitN(strings.TrimPrefix(line, prefix), "#", 2)[0]))
		_, errOut, err := run(t, args...)
		if err != nil {
			t.Errorf("%q, as the demo printed it: %v\n%s", line, err, errOut)
		}
		ran[args[0]] = true
	}
	for _, cmd := range []string{"report", "lint", "syncs", "export"} {
		if !ran[cmd] {
			t.Errorf("the demo printed no `cudatap %s` command:\n%s", cmd, stdout)
		}
	}
	if tr := readChrome(t, filepath.Join(dir, "trace.json.gz")); countLaunches(tr) == 0 {
		t.Error("the printed export command wrote a trace without launches")
	}
}

// shellSplit splits a line as a shell would the words shellWord quoted:
// spaces separate words outside single quotes; \' outside them is a quote.
func shellSplit(t *testing.T, line string) []string {
	var words []string
	var word strings.Builder
	quoted, inWord, escaped := false, false, false
	for _, r := range line {
		switch {
		case escaped:
			word.WriteRune(r)
			escaped = false
		case r == '\\' && !quoted:
			escaped, inWord = true, true
		case r == '\'':
			quoted, inWord = !quoted, true
		case r == ' ' && !quoted:
			if inWord {
				words, inWord = append(words, word.String()), false
				word.Reset()
			}
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	if quoted {
		t.Fatalf("unbalanced quotes in %q", line)
	}
	if inWord {
		words = append(words, word.String())
	}
	return words
}
