// A separate module, kept out of the main build: it compares the cost of one
// foreign call through purego with a cgo trampoline that calls a function
// pointer, using libc functions as stand-ins for trivial driver calls.
// Run: GOFLAGS=-mod=mod go test -run '^$' -bench FFI -cpu 1 -count 3
module ffi-compare

go 1.26

require github.com/ebitengine/purego v0.11.3
