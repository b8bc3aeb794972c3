package cuda

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// goLayout gives, for each line key of testdata/layout_*.txt, the size or
// offset of the Go mirror of that cuda.h type or field.
func goLayout() map[string]uintptr {
	var p AllocationProp
	var a AccessDesc
	var l MemLocation
	return map[string]uintptr{
		"size CUmemLocation":                                         unsafe.Sizeof(l),
		"offset CUmemLocation.type":                                  unsafe.Offsetof(l.Type),
		"offset CUmemLocation.id":                                    unsafe.Offsetof(l.ID),
		"size CUmemAllocationProp":                                   unsafe.Sizeof(p),
		"offset CUmemAllocationProp.type":                            unsafe.Offsetof(p.Type),
		"offset CUmemAllocationProp.requestedHandleTypes":            unsafe.Offsetof(p.RequestedHandleTypes),
		"offset CUmemAllocationProp.location":                        unsafe.Offsetof(p.Location),
		"offset CUmemAllocationProp.win32HandleMetaData":             unsafe.Offsetof(p.Win32HandleMetaData),
		"offset CUmemAllocationProp.allocFlags":                      unsafe.Offsetof(p.AllocFlags),
		"offset CUmemAllocationProp.allocFlags.compressionType":      unsafe.Offsetof(p.AllocFlags) + unsafe.Offsetof(p.AllocFlags.CompressionType),
		"offset CUmemAllocationProp.allocFlags.gpuDirectRDMACapable": unsafe.Offsetof(p.AllocFlags) + unsafe.Offsetof(p.AllocFlags.GPUDirectRDMACapable),
		"offset CUmemAllocationProp.allocFlags.usage":                unsafe.Offsetof(p.AllocFlags) + unsafe.Offsetof(p.AllocFlags.Usage),
		"offset CUmemAllocationProp.allocFlags.reserved":             unsafe.Offsetof(p.AllocFlags) + unsafe.Offsetof(p.AllocFlags.Reserved),
		"size CUmemAccessDesc":                                       unsafe.Sizeof(a),
		"offset CUmemAccessDesc.location":                            unsafe.Offsetof(a.Location),
		"offset CUmemAccessDesc.flags":                               unsafe.Offsetof(a.Flags),
		"size CUuuid":                                                unsafe.Sizeof(UUID{}),
		"size CUdeviceptr":                                           unsafe.Sizeof(DevicePtr(0)),
		"size CUmemGenericAllocationHandle":                          unsafe.Sizeof(MemHandle(0)),
		"size CUresult":                                              unsafe.Sizeof(Result(0)),
		"size CUdevice":                                              unsafe.Sizeof(Device{}.handle),
	}
}

// TestLayoutMatchesCudaH compares the Go structs with the sizes and offsets
// that testdata/layout.c printed against real cuda.h headers.
func TestLayoutMatchesCudaH(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("the layouts in testdata are for 64-bit platforms")
	}
	files, err := filepath.Glob("testdata/layout_*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata/layout_*.txt fixtures (%v)", err)
	}
	want := goLayout()
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			f, err := os.Open(file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			seen := map[string]bool{}
			sc := bufio.NewScanner(f)
			for line := 1; sc.Scan(); line++ {
				text := strings.TrimSpace(sc.Text())
				if text == "" || strings.HasPrefix(text, "#") {
					continue
				}
				i := strings.LastIndexByte(text, ' ')
				if i < 0 {
					t.Fatalf("%s:%d: malformed line %q", file, line, text)
				}
				key := text[:i]
				n, err := strconv.ParseUint(text[i+1:], 10, 64)
				if err != nil {
					t.Fatalf("%s:%d: %v", file, line, err)
				}
				got, ok := want[key]
				if !ok {
					t.Errorf("%s:%d: %q has no Go counterpart in this test", file, line, key)
					continue
				}
				seen[key] = true
				if uint64(got) != n {
					t.Errorf("%s: cuda.h says %d, the Go mirror has %d", key, n, got)
				}
			}
			if err := sc.Err(); err != nil {
				t.Fatal(err)
			}
			for key := range want {
				if !seen[key] {
					t.Errorf("%s does not list %q", file, key)
				}
			}
		})
	}
}
