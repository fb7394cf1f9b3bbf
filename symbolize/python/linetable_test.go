package python

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"testing"
)

// TestLineTables checks the three line-table decoders against each
// interpreter's own line numbers for every code object of a few stdlib
// modules.
func TestLineTables(t *testing.T) {
	for _, p := range supportedPythons(t) {
		t.Run(p.name(), func(t *testing.T) {
			out, err := exec.Command(p.exe, "testdata/lines.py").Output()
			if err != nil {
				t.Fatalf("%s testdata/lines.py: %v", p.exe, err)
			}
			s := bufio.NewScanner(bytes.NewReader(out))
			s.Buffer(nil, 16<<20)
			codes, units, bad := 0, 0, 0
			for s.Scan() {
				var c struct {
					Name  string
					First int
					Table string
					Lines []int
				}
				if err := json.Unmarshal(s.Bytes(), &c); err != nil {
					t.Fatal(err)
				}
				table, err := hex.DecodeString(c.Table)
				if err != nil {
					t.Fatal(err)
				}
				codes++
				for i, want := range c.Lines {
					var got int
					switch p.minor {
					case 9:
						got = line39(table, c.First, 2*i)
					case 10:
						got = line310(table, c.First, 2*i)
					default:
						got = line311(table, c.First, i)
					}
					units++
					if got != want {
						if bad++; bad <= 10 {
							t.Errorf("%s (first line %d) instruction %d: line %d, want %d", c.Name, c.First, i, got, want)
						}
					}
				}
			}
			if codes < 100 {
				t.Fatalf("only %d code objects", codes)
			}
			t.Logf("%d code objects, %d instructions, %d wrong", codes, units, bad)
		})
	}
}

func TestLineTableEdges(t *testing.T) {
	// Before the first instruction: the first line.
	if got := line311([]byte{0x80 | 13<<3, 0x02}, 7, -1); got != 7 {
		t.Errorf("line311(-1) = %d", got)
	}
	if got := line310(nil, 7, -2); got != 7 {
		t.Errorf("line310(-2) = %d", got)
	}
	// Past the table: no line.
	if got := line311([]byte{0x80 | 13<<3, 0x02}, 7, 5); got != -1 {
		t.Errorf("line311 past the end = %d", got)
	}
	// A corrupt table does not panic.
	for _, tb := range [][]byte{{0xff}, {0xf0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, {0x00}, {0x80 | 14<<3}} {
		line311(tb, 1, 3)
		line310(tb, 1, 3)
		line39(tb, 1, 3)
	}
}
