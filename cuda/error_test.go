package cuda

import (
	"errors"
	"fmt"
	"testing"
)

func TestErrorMessage(t *testing.T) {
	tests := []struct {
		name string
		err  *Error
		want string
	}{
		{
			name: "driver words",
			err:  &Error{Code: 2, Name: "CUDA_ERROR_OUT_OF_MEMORY", Desc: "out of memory", Call: "cuMemAlloc_v2(1073741824)"},
			want: "cuMemAlloc_v2(1073741824): CUDA_ERROR_OUT_OF_MEMORY: out of memory",
		},
		{
			name: "no driver words, known code",
			err:  &Error{Code: 600, Call: "cuEventQuery(0x10)"},
			want: "cuEventQuery(0x10): CUDA_ERROR_NOT_READY: unrecognized error code 600",
		},
		{
			name: "unknown code",
			err:  &Error{Code: 4242, Call: "cuMemFree_v2(0x7f0000000000)"},
			want: "cuMemFree_v2(0x7f0000000000): CUresult(4242): unrecognized error code 4242",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestNewErrorWithoutDriver checks the fallback to the built-in names when
// no driver can be asked.
func TestNewErrorWithoutDriver(t *testing.T) {
	tests := []struct {
		r    Result
		fn   string
		args []string
		want string
	}{
		{ErrorOutOfMemory, "cuMemAlloc_v2", []string{dec(1 << 30)}, "cuMemAlloc_v2(1073741824): CUDA_ERROR_OUT_OF_MEMORY: out of memory"},
		{ErrorInvalidValue, "cuMemcpyDtoD_v2", []string{hex(0x1000), hex(0x2000), dec(64)}, "cuMemcpyDtoD_v2(0x1000, 0x2000, 64): CUDA_ERROR_INVALID_VALUE: invalid argument"},
		{ErrorNoDevice, "cuInit", []string{"0"}, "cuInit(0): CUDA_ERROR_NO_DEVICE: no CUDA-capable device is detected"},
		{ErrorNotReady, "cuCtxSynchronize", nil, "cuCtxSynchronize(): CUDA_ERROR_NOT_READY: device not ready"},
		{Result(31337), "cuMemMap", []string{hex(1)}, "cuMemMap(0x1): CUresult(31337): unrecognized error code 31337"},
	}
	for _, tt := range tests {
		t.Run(tt.fn, func(t *testing.T) {
			err := newErrorFrom(nil, tt.r, tt.fn, tt.args...)
			if got := err.Error(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			if err.Code != tt.r {
				t.Errorf("Code = %d, want %d", err.Code, tt.r)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	oom := newErrorFrom(nil, ErrorOutOfMemory, "cuMemAlloc_v2", "1")
	notReady := newErrorFrom(nil, ErrorNotReady, "cuStreamQuery", "stream 0")
	wrapped := fmt.Errorf("growing the pool: %w", oom)
	tests := []struct {
		name          string
		err           error
		oom, notReady bool
	}{
		{"nil", nil, false, false},
		{"oom", oom, true, false},
		{"wrapped oom", wrapped, true, false},
		{"joined oom", errors.Join(errors.New("x"), oom), true, false},
		{"not ready", notReady, false, true},
		{"plain error", errors.New("out of memory"), false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsOutOfMemory(tt.err); got != tt.oom {
				t.Errorf("IsOutOfMemory = %v, want %v", got, tt.oom)
			}
			if got := IsNotReady(tt.err); got != tt.notReady {
				t.Errorf("IsNotReady = %v, want %v", got, tt.notReady)
			}
		})
	}
	if !errors.Is(wrapped, &Error{Code: ErrorOutOfMemory}) {
		t.Error("errors.Is(wrapped OOM, &Error{Code: OOM}) = false")
	}
	if errors.Is(wrapped, &Error{Code: ErrorInvalidValue}) {
		t.Error("errors.Is matched a different code")
	}
}

func TestResultString(t *testing.T) {
	tests := map[Result]string{
		0:    "CUDA_SUCCESS",
		2:    "CUDA_ERROR_OUT_OF_MEMORY",
		801:  "CUDA_ERROR_NOT_SUPPORTED",
		-1:   "CUresult(-1)",
		1234: "CUresult(1234)",
	}
	for r, want := range tests {
		if got := r.String(); got != want {
			t.Errorf("Result(%d).String() = %q, want %q", int32(r), got, want)
		}
	}
}
