package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestManPages: `cudatap man DIR` writes a page for every command a user
// can run, each with the command's name, its flags and the pages beside
// it, and none for hidden commands or help.
func TestManPages(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "man") // made by the command
	if _, stderr, err := run(t, "man", dir); err != nil {
		t.Fatalf("cudatap man: %v\n%s", err, stderr)
	}
	want := map[string]*cobra.Command{}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if c.HasParent() && !c.IsAvailableCommand() {
			return
		}
		want[strings.ReplaceAll(c.CommandPath(), " ", "-")+".1"] = c
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(newRootCmd())
	for _, must := range []string{"cudatap.1", "cudatap-record.1", "cudatap-report.1", "cudatap-agent.1", "cudatap-completion-bash.1"} {
		if want[must] == nil {
			t.Errorf("the walk found no command for %s: the test no longer sees the CLI", must)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, e := range entries {
		got[e.Name()] = true
		if want[e.Name()] == nil {
			t.Errorf("%s: a page for no command a user can run", e.Name())
		}
	}
	for name, c := range want {
		if !got[name] {
			t.Errorf("%s: no page for %q", name, c.CommandPath())
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		page := string(b)
		title := strings.ToUpper(strings.ReplaceAll(c.CommandPath(), " ", "-"))
		if !strings.Contains(page, "\n.TH \""+title+"\" \"1\"") {
			t.Errorf("%s: want a .TH %q header, got %.80q", name, title, page)
		}
		if strings.Contains(page, "Auto generated") {
			t.Errorf("%s: carries a generation date footer: pages must be reproducible", name)
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if !f.Hidden && !strings.Contains(page, `\fB--`+f.Name+`\fP`) {
				t.Errorf("%s: flag --%s missing", name, f.Name)
			}
		})
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() && !strings.Contains(page, `\fB`+strings.ReplaceAll(sub.CommandPath(), " ", "-")+"(1)") {
				t.Errorf("%s: no SEE ALSO entry for %s(1)", name, sub.CommandPath())
			}
		}
	}
}
