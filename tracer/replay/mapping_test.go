package replay

import (
	"bytes"
	"errors"
	"maps"
	"testing"

	"github.com/cudatap/cudatap/tracer/model"
	"github.com/cudatap/cudatap/tracer/recording"
)

// TestMappingRecords: mapping records come back as written, renumbered with
// their process by a Transform and rewritten by recording.Writer.Names; a recording
// written without them (as every recording before them) reads with an
// empty table; a cut or lying one is recording.ErrFormat.
func TestMappingRecords(t *testing.T) {
	lib := model.Mapping{File: "/venv/lib/libcudart.so.13", BuildID: "6f2d1a", Start: 0x7f00_0000_1000, Limit: 0x7f00_0009_0000, Offset: 0x1000}
	exe := model.Mapping{File: "/usr/bin/python3.12", Start: 0x40_1000, Limit: 0x40_9000, Offset: 0x1000} // no build ID
	deleted := model.Mapping{File: "/tmp/jit (x).so", BuildID: "ab", Start: 0x7f10_0000_0000, Limit: 0x7f10_0000_1000}
	write := func(mappings bool) []byte {
		var buf bytes.Buffer
		w, err := recording.NewWriter(&buf, recording.NewHeader("t", 0))
		if err != nil {
			t.Fatal(err)
		}
		w.Process(7, model.ProcessInfo{Comm: "python3"})
		w.Frame(7, lib.Start+0x10, "cudaStreamSynchronize (libcudart.so.13)")
		if mappings {
			w.Mapping(7, lib)
			w.Mapping(7, exe)
			w.Mapping(9, deleted)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	want := map[model.NameKey]model.Mapping{{PID: 7, Key: lib.Start}: lib, {PID: 7, Key: exe.Start}: exe, {PID: 9, Key: deleted.Start}: deleted}

	file := write(true)
	rp, err := ReadNames(bytes.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(rp.Names.Mappings, want) {
		t.Errorf("mappings %v, want %v", rp.Names.Mappings, want)
	}
	if got := rp.Names.MappingsOf(7); len(got) != 2 || got[0] != exe || got[1] != lib {
		t.Errorf("MappingsOf(7) = %v, want exe then lib", got)
	}
	// The events pass skips them.
	if _, err := ReadEvents(bytes.NewReader(file), model.New(nil), nil); err != nil {
		t.Errorf("events pass: %v", err)
	}

	rp, err = ReadNamesWith(bytes.NewReader(file), Transform{PIDs: map[uint32]uint32{7: 70}})
	if err != nil {
		t.Fatal(err)
	}
	if got := rp.Names.MappingsOf(70); len(got) != 2 || len(rp.Names.MappingsOf(7)) != 0 || len(rp.Names.MappingsOf(9)) != 1 {
		t.Errorf("renumbered: %v", rp.Names.Mappings)
	}

	// recording.Writer.Names (a merged recording) writes them again.
	var again bytes.Buffer
	w, _ := recording.NewWriter(&again, recording.NewHeader("t", 0))
	rp, _ = ReadNames(bytes.NewReader(file))
	w.Names(rp.Names, true)
	w.Close()
	rp2, err := ReadNames(bytes.NewReader(again.Bytes()))
	if err != nil || !maps.Equal(rp2.Names.Mappings, want) {
		t.Errorf("rewritten: %v %v", rp2.Names.Mappings, err)
	}

	// Without mapping records.
	rp, err = ReadNames(bytes.NewReader(write(false)))
	if err != nil || rp.Names.Mappings == nil || len(rp.Names.Mappings) != 0 || rp.Names.Frame(7, lib.Start+0x10) == "" {
		t.Errorf("recording without mappings: %v, mappings %v", err, rp.Names.Mappings)
	}

	// A record too short for its fixed part (pid, start, limit, offset),
	// and one whose build ID length runs past its end.
	const mappingSize = 4 + 8*3
	for _, payload := range [][]byte{make([]byte, mappingSize-1), append(make([]byte, mappingSize), 5, 'a')} {
		var buf bytes.Buffer
		w, _ := recording.NewWriter(&buf, recording.NewHeader("t", 0))
		w.Raw(recording.RecMapping, payload)
		w.Close()
		if _, err := ReadNames(bytes.NewReader(buf.Bytes())); !errors.Is(err, recording.ErrFormat) {
			t.Errorf("payload %x: error %v, want ErrFormat", payload, err)
		}
	}
}
