package main

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cudatap/cudatap/internal/agent"
)

// TestDumpAsksTheAgent: cudatap dump PID posts /dump?pid=PID to the agent
// with its token and prints where the dump went; what the agent refuses,
// and an agent that is not there, are said in words.
func TestDumpAsksTheAgent(t *testing.T) {
	var got *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		switch r.URL.Query().Get("pid") {
		case "4123":
			json.NewEncoder(w).Encode(agent.DumpAnswer{Trigger: "on_demand", PIDs: []uint32{4123}, Path: "/var/tmp/cudatap-dumps/x.cudatap",
				Report: "/var/tmp/cudatap-dumps/x.html", Bytes: 2 << 20, Events: 1234, Restated: 5})
		default:
			http.Error(w, "process 99: not traced: the flight recorder holds no CUDA call of it", http.StatusNotFound)
		}
	}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	out, _, err := run(t, "dump", "--agent", addr, "--token", "s3cret", "4123")
	if err != nil {
		t.Fatal(err)
	}
	if got.Method != http.MethodPost || got.URL.Path != "/dump" || got.Header.Get("Authorization") != "Bearer s3cret" {
		t.Errorf("asked %s %s with %q", got.Method, got.URL, got.Header.Get("Authorization"))
	}
	if want := "/var/tmp/cudatap-dumps/x.cudatap (2.0 MiB, 1234 events, 5 calls from before the window restated)\n/var/tmp/cudatap-dumps/x.html\n"; out != want {
		t.Errorf("printed %q, want %q", out, want)
	}
	if _, _, err := run(t, "dump", "--agent", addr, "99"); err == nil || !strings.Contains(err.Error(), "process 99: not traced") {
		t.Errorf("an untraced pid: %v", err)
	}

	// Nobody listening: a port just closed.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := ln.Addr().String()
	ln.Close()
	if _, _, err := run(t, "dump", "--agent", closed, "1"); err == nil || !strings.Contains(err.Error(), "no agent answers on "+closed+": start one with sudo cudatap agent --flight-recorder 30s") {
		t.Errorf("no agent: %v", err)
	}
}
