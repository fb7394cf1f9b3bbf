package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAgentFlags: the agent's flags reach its options, whose errors name
// the flag to change (the agent itself is tested in internal/agent).
func TestAgentFlags(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "0.0.0.0:1"}, "without --token"},
		{[]string{"--listen", "nonsense"}, `--listen "nonsense"`},
		{[]string{"--window", "0s"}, "--window 0s --every 1m0s"},
		{[]string{"--window", "2m"}, "--window 2m0s --every 1m0s"},
		{[]string{"--continuous", "--every", "0s"}, "--every 0s: with --continuous"},
		{[]string{"--launch-times", "--record-launches"}, "drop one of the two"},
		{[]string{"--max-requests", "0"}, "--max-requests 0"},
		{[]string{"--capture-max-bytes", "1000"}, "--capture-max-bytes 1000"},
		{[]string{"--max-cpu", "-1"}, "--max-cpu -1"},
		{[]string{"--token", "x", "--token-file", empty}, "give one"},
		{[]string{"--token-file", empty}, "is empty"},
	} {
		_, _, err := run(t, append([]string{"agent"}, tc.args...)...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("agent %s: %v, want an error saying %q", strings.Join(tc.args, " "), err, tc.want)
		}
	}
}
