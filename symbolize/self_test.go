package symbolize

import "reflect"

// funcAddr returns its own entry address.
//
//go:noinline
func funcAddr() uint64 { return uint64(reflect.ValueOf(funcAddr).Pointer()) }
