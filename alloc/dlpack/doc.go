// Package dlpack exchanges device memory with other frameworks (PyTorch,
// CuPy, JAX, ...) through DLPack, without a copy.
//
// DLPack describes a tensor by a C struct: a data pointer, a device, a
// shape, strides and an element type, inside a "managed" struct that also
// carries the producer's deleter, which the consumer calls once when it no
// longer needs the memory. The current protocol (DLPack 1.x) uses
// DLManagedTensorVersioned, which adds a version and flags (read-only,
// is-copied); the legacy DLManagedTensor (no version, no flags) is still
// what older consumers take. This package declares both layouts in Go
// (types.go; the C compiler's view of the same structs, dlpack.h, is
// compared field by field in the tests) and handles both.
//
// # Export
//
// Export (or ExportLegacy) hands an alloc.Buffer, or a view of one, to a
// consumer. The managed struct, with its shape and strides, lives in C
// memory (the consumer keeps the pointer after the call returns); its
// manager_ctx is a number that names the export in a table here, and its
// deleter (a C trampoline, trampoline.c) calls back into Go. Exporting
// takes the allocation over: the memory of the buffer's owner goes back to
// the allocator when the deleter of the last tensor exported from it (or
// from any view of it) has been called. The Go side must not Free the
// owner itself after Export; Share makes another tensor of the same memory
// (one per consumer, as __dlpack__ does on each call).
//
// The device is reported as kDLCUDA with the device index given in the
// Spec. On the simulated device (alloc/sim) the addresses are the
// simulator's, reported as kDLCUDA too: the tests of this package and of
// the Python package exchange such tensors between vram's own producer and
// consumer; no other framework can read them.
//
// # Import
//
// Import (or ImportLegacy) turns a managed tensor made by another producer
// into an alloc.Buffer view over its bytes (Allocator.Wrap): no copy; the
// first Free of that Buffer calls the producer's deleter, exactly once.
// Before it takes the tensor over, Import checks it (Check): the version
// (major 1), the device type (kDLCUDA or kDLCUDAManaged) and index, the
// number of dimensions, non-negative dimensions and strides, an element
// type of whole bytes, sizes that do not overflow 64 bits, and a data
// pointer that is not null when the tensor holds any byte. A refused
// tensor is not taken: the caller still owns it and still calls its
// deleter. A read-only tensor becomes a read-only Buffer (writes fail with
// alloc.ErrReadOnly); the is-copied flag is reported in Imported.
//
// # Streams
//
// DLPack leaves stream synchronisation to the exchange protocol above it
// (Python's __dlpack__(stream=...)). Export and Import do none: a consumer
// that uses the memory on another stream than the producer's must order
// the two itself.
package dlpack
