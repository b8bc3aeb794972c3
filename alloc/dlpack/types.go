package dlpack

import "fmt"

// The C layouts (dlpack.h). Pointer fields that the Go garbage collector
// must not follow (device addresses, opaque contexts, function pointers)
// are uintptr.

// DeviceType is DLDeviceType.
type DeviceType int32

// The device types of DLPack 1.x.
const (
	CPU          DeviceType = 1  // kDLCPU
	CUDA         DeviceType = 2  // kDLCUDA
	CUDAHost     DeviceType = 3  // kDLCUDAHost (pinned host memory)
	OpenCL       DeviceType = 4  // kDLOpenCL
	Vulkan       DeviceType = 7  // kDLVulkan
	Metal        DeviceType = 8  // kDLMetal
	VPI          DeviceType = 9  // kDLVPI
	ROCM         DeviceType = 10 // kDLROCM
	ROCMHost     DeviceType = 11 // kDLROCMHost
	ExtDev       DeviceType = 12 // kDLExtDev
	CUDAManaged  DeviceType = 13 // kDLCUDAManaged (unified memory)
	OneAPI       DeviceType = 14 // kDLOneAPI
	WebGPU       DeviceType = 15 // kDLWebGPU
	Hexagon      DeviceType = 16 // kDLHexagon
	MAIA         DeviceType = 17 // kDLMAIA
	maxKnownType            = MAIA
)

var deviceNames = map[DeviceType]string{
	CPU: "kDLCPU", CUDA: "kDLCUDA", CUDAHost: "kDLCUDAHost", OpenCL: "kDLOpenCL",
	Vulkan: "kDLVulkan", Metal: "kDLMetal", VPI: "kDLVPI", ROCM: "kDLROCM",
	ROCMHost: "kDLROCMHost", ExtDev: "kDLExtDev", CUDAManaged: "kDLCUDAManaged",
	OneAPI: "kDLOneAPI", WebGPU: "kDLWebGPU", Hexagon: "kDLHexagon", MAIA: "kDLMAIA",
}

func (t DeviceType) String() string {
	if s, ok := deviceNames[t]; ok {
		return fmt.Sprintf("%s (%d)", s, int32(t))
	}
	return fmt.Sprintf("unknown device type %d", int32(t))
}

// Device is DLDevice.
type Device struct {
	Type DeviceType
	ID   int32
}

// TypeCode is DLDataTypeCode.
type TypeCode uint8

// The type codes (DLPack 1.1 adds the float8 and float4 codes, 7 to 17).
const (
	Int          TypeCode = 0 // kDLInt
	UInt         TypeCode = 1 // kDLUInt
	Float        TypeCode = 2 // kDLFloat
	OpaqueHandle TypeCode = 3 // kDLOpaqueHandle
	Bfloat       TypeCode = 4 // kDLBfloat
	Complex      TypeCode = 5 // kDLComplex
	Bool         TypeCode = 6 // kDLBool
	maxTypeCode  TypeCode = 17
)

// DataType is DLDataType: Lanes elements of Bits bits each, of kind Code.
type DataType struct {
	Code  TypeCode
	Bits  uint8
	Lanes uint16
}

// Common element types.
var (
	Float16  = DataType{Float, 16, 1}
	BFloat16 = DataType{Bfloat, 16, 1}
	Float32  = DataType{Float, 32, 1}
	Float64  = DataType{Float, 64, 1}
	Int8     = DataType{Int, 8, 1}
	Int32    = DataType{Int, 32, 1}
	Int64    = DataType{Int, 64, 1}
	UInt8    = DataType{UInt, 8, 1}
	BoolType = DataType{Bool, 8, 1}
)

func (d DataType) String() string {
	names := [...]string{"int", "uint", "float", "handle", "bfloat", "complex", "bool"}
	name := fmt.Sprintf("code%d_", d.Code)
	if int(d.Code) < len(names) {
		name = names[d.Code]
	}
	if d.Lanes == 1 {
		return fmt.Sprintf("%s%d", name, d.Bits)
	}
	return fmt.Sprintf("%s%dx%d", name, d.Bits, d.Lanes)
}

// ItemSize is the size of one element in bytes, or 0 when the type is not
// a whole number of bytes (or has no lanes).
func (d DataType) ItemSize() uint64 {
	if d.Bits == 0 || d.Bits%8 != 0 || d.Lanes == 0 {
		return 0
	}
	return uint64(d.Bits/8) * uint64(d.Lanes)
}

// Tensor is DLTensor. Strides are in elements; a nil Strides pointer means
// compact row-major.
type Tensor struct {
	Data       uintptr // device address
	Device     Device
	NDim       int32
	DType      DataType
	Shape      *int64
	Strides    *int64
	ByteOffset uint64
}

// ManagedTensor is the legacy DLManagedTensor.
type ManagedTensor struct {
	DLTensor   Tensor
	ManagerCtx uintptr
	Deleter    uintptr // void (*)(DLManagedTensor *)
}

// Version is DLPackVersion.
type Version struct {
	Major, Minor uint32
}

// ManagedTensorVersioned is DLManagedTensorVersioned (DLPack 1.x).
type ManagedTensorVersioned struct {
	Version    Version
	ManagerCtx uintptr
	Deleter    uintptr // void (*)(DLManagedTensorVersioned *)
	Flags      uint64
	DLTensor   Tensor
}

// The version this package produces, and the major version it accepts.
const (
	MajorVersion = 1
	MinorVersion = 1
)

// Flags of ManagedTensorVersioned.
const (
	FlagReadOnly          uint64 = 1 << 0 // DLPACK_FLAG_BITMASK_READ_ONLY
	FlagIsCopied          uint64 = 1 << 1 // DLPACK_FLAG_BITMASK_IS_COPIED
	FlagSubbyteTypePadded uint64 = 1 << 2 // DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (1.1)
)

// MaxDims is the most dimensions Export and Import accept.
const MaxDims = 64
