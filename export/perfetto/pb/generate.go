// Package pb is the Go code of Perfetto's trace format, as much of it as
// cudatap writes (../proto/perfetto_trace.proto): the writer encodes
// packets by hand for speed, the tests read traces back with these types.
package pb

// protoc is Debian 12's (3.21.12: its version is in the generated header);
// protoc-gen-go is built at the google.golang.org/protobuf version go.mod
// requires, so that make generate reproduces the committed file.
//go:generate sh -c "bin=$(mktemp -d) && trap 'rm -rf $bin' EXIT && go build -o $bin/protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go && protoc --plugin=protoc-gen-go=$bin/protoc-gen-go -I ../proto --go_out=. --go_opt=paths=source_relative perfetto_trace.proto"
