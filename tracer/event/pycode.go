package event

import (
	"encoding/binary"
	"fmt"
)

// PyCode is the pseudo-API of the records that carry a copy of a Python
// code object (struct py_code, bpf/pycode.h): they follow the first stack
// record that refers to the code object and never reach the model.
const PyCode API = 0xfff1

// Layout of struct py_code: the first 32 bytes as in struct event.
const (
	pyCodeHead       = 256
	pyCodeStr        = 512
	pyCodeTable      = 8192
	offPyCodeCode    = 32
	offPyCodeAddr    = 40
	offPyCodeLen     = 64
	offPyCodeHead    = 80
	offPyCodeFile    = offPyCodeHead + pyCodeHead
	offPyCodeName    = offPyCodeFile + pyCodeStr
	offPyCodeTable   = offPyCodeName + pyCodeStr
	PyCodeRecordSize = offPyCodeTable + pyCodeTable
)

// CodeCopy is a decoded struct py_code: the code object at Code in process
// PID, its first bytes, and the copies of the objects it points to (file
// name, function name, line table) at Addr. The slices alias the record.
type CodeCopy struct {
	PID, TID uint32
	Code     uint64
	Head     []byte
	Addr     [3]uint64
	Data     [3][]byte
}

// IsPyCode reports whether raw is a code object copy (and not an event).
func IsPyCode(raw []byte) bool {
	return len(raw) >= 24 && CookieAPI(binary.LittleEndian.Uint64(raw[16:])) == PyCode
}

// DecodePyCode parses a code object copy.
func DecodePyCode(raw []byte) (CodeCopy, error) {
	if len(raw) < PyCodeRecordSize {
		return CodeCopy{}, fmt.Errorf("%w: Python code copy of %d bytes, want %d", ErrShortRecord, len(raw), PyCodeRecordSize)
	}
	le := binary.LittleEndian
	c := CodeCopy{PID: le.Uint32(raw[24:]), TID: le.Uint32(raw[28:]), Code: le.Uint64(raw[offPyCodeCode:])}
	c.Head = raw[offPyCodeHead : offPyCodeHead+min(int(le.Uint32(raw[offPyCodeLen+12:])), pyCodeHead)]
	offs := [3]int{offPyCodeFile, offPyCodeName, offPyCodeTable}
	caps := [3]int{pyCodeStr, pyCodeStr, pyCodeTable}
	for i := range c.Addr {
		c.Addr[i] = le.Uint64(raw[offPyCodeAddr+8*i:])
		n := min(int(le.Uint32(raw[offPyCodeLen+4*i:])), caps[i])
		c.Data[i] = raw[offs[i] : offs[i]+n]
	}
	return c, nil
}
