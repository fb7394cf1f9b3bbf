package main

import "testing"

// TestArgumentCountsAreUsageErrors: a wrong number of arguments is a usage
// error (exit status 2) in every subcommand; a new subcommand must be added
// here.
func TestArgumentCountsAreUsageErrors(t *testing.T) {
	bad := map[string][][]string{
		"record":     {{"record"}, {"record", "-p", "1", "extra"}},
		"export":     {{"export"}, {"export", "a.cudatap", "b.cudatap"}},
		"syncs":      {{"syncs"}, {"syncs", "a.cudatap", "b.cudatap"}, {"syncs", "-p", "1", "a.cudatap"}, {"syncs", "a.cudatap", "--", "true"}, {"syncs", "--"}},
		"doctor":     {{"doctor", "extra"}},
		"gpus":       {{"gpus", "extra"}},
		"top":        {{"top", "extra"}},
		"version":    {{"version", "extra"}},
		"demo":       {{"demo", "extra"}},
		"agent":      {{"agent", "extra"}},
		"dump":       {{"dump", "1", "2"}, {"dump", "notapid"}},
		"merge":      {{"merge"}},
		"report":     {{"report"}, {"report", "a.cudatap", "b.cudatap"}},
		"lint":       {{"lint"}, {"lint", "a.cudatap", "b.cudatap"}},
		"completion": {{"completion", "bash", "extra"}, {"completion", "nosuchshell"}},
		"man":        {{"man"}, {"man", "a", "b"}},
	}
	for _, c := range newRootCmd().Commands() {
		if _, ok := bad[c.Name()]; !ok && c.Name() != "help" {
			t.Errorf("subcommand %q has no case here: add its wrong argument counts", c.Name())
		}
	}
	for name, cases := range bad {
		for _, args := range cases {
			_, _, err := run(t, args...)
			if code := exitCode(err); code != exitUsage {
				t.Errorf("%s: %q: exit status %d, want %d (usage): %v", name, args, code, exitUsage, err)
			}
		}
	}
}
