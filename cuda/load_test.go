package cuda

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// fakeLoader serves a fixed set of symbols, so the loader's logic can be
// tested without a driver.
type fakeLoader struct {
	openErr error
	missing map[string]bool
	next    uintptr
}

func (f *fakeLoader) open(name string) (uintptr, error) {
	if f.openErr != nil {
		return 0, f.openErr
	}
	return 0x1000, nil
}

func (f *fakeLoader) sym(_ uintptr, name string) (uintptr, error) {
	if f.missing[name] {
		return 0, errors.New("undefined symbol: " + name)
	}
	f.next += 16
	return 0x2000 + f.next, nil
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name       string
		loader     *fakeLoader
		wantErr    []string // substrings of the error; nil for success
		wantSymbol string
		check      func(t *testing.T, d *driver)
	}{
		{
			name:    "library missing",
			loader:  &fakeLoader{openErr: errors.New("libcuda.so.1: cannot open shared object file: No such file or directory")},
			wantErr: []string{"cannot load libcuda.so.1", "No such file", "NVIDIA driver is not installed", "LD_LIBRARY_PATH"},
		},
		{
			name:       "required symbol missing",
			loader:     &fakeLoader{missing: map[string]bool{"cuMemAddressReserve": true}},
			wantErr:    []string{"libcuda.so.1 has no function cuMemAddressReserve", "undefined symbol", "too old"},
			wantSymbol: "cuMemAddressReserve",
		},
		{
			name:   "all present: versioned names preferred",
			loader: &fakeLoader{},
			check: func(t *testing.T, d *driver) {
				if d.elapsedTimeName != "cuEventElapsedTime_v2" || d.uuidName != "cuDeviceGetUuid_v2" {
					t.Errorf("bound %s and %s, want the _v2 names", d.elapsedTimeName, d.uuidName)
				}
			},
		},
		{
			name:   "older driver: fall back to unversioned alternatives",
			loader: &fakeLoader{missing: map[string]bool{"cuEventElapsedTime_v2": true, "cuDeviceGetUuid_v2": true}},
			check: func(t *testing.T, d *driver) {
				if d.elapsedTimeName != "cuEventElapsedTime" || d.uuidName != "cuDeviceGetUuid" {
					t.Errorf("bound %s and %s, want the fallbacks", d.elapsedTimeName, d.uuidName)
				}
			},
		},
		{
			name:       "both alternatives missing",
			loader:     &fakeLoader{missing: map[string]bool{"cuDeviceGetUuid_v2": true, "cuDeviceGetUuid": true}},
			wantErr:    []string{"has no function cuDeviceGetUuid_v2"},
			wantSymbol: "cuDeviceGetUuid_v2",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := load(tt.loader, LibraryName)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("load: %v", err)
				}
				// Every function field, not only those bindings lists,
				// so that a field without a sym tag is caught.
				v := reflect.ValueOf(d).Elem()
				for i := range v.NumField() {
					f := v.Type().Field(i)
					if f.Type.Kind() == reflect.Uintptr && f.Name != "handle" && v.Field(i).Uint() == 0 {
						t.Errorf("%s not bound (tag %q)", f.Name, f.Tag)
					}
				}
				tt.check(t, d)
				return
			}
			if err == nil {
				t.Fatal("load succeeded, want an error")
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
			if !errors.Is(err, ErrNoDriver) {
				t.Errorf("errors.Is(%v, ErrNoDriver) = false", err)
			}
			var le *LoadError
			if !errors.As(err, &le) || le.Symbol != tt.wantSymbol || le.Library != LibraryName {
				t.Errorf("LoadError = %+v, want library %s symbol %q", le, LibraryName, tt.wantSymbol)
			}
		})
	}
}

// TestLoadRealLoaderMissingLibrary goes through the system's dlopen with a
// library name that does not exist.
func TestLoadRealLoaderMissingLibrary(t *testing.T) {
	const name = "libcuda-vram-test-missing.so.1"
	_, err := load(dlOpener{}, name)
	if err == nil {
		t.Fatalf("loading %s succeeded", name)
	}
	if !strings.Contains(err.Error(), name) || !errors.Is(err, ErrNoDriver) {
		t.Errorf("error %q should name %s and match ErrNoDriver", err, name)
	}
}

// TestNoDriver checks that, on a machine without libcuda.so.1, every entry
// point returns the load error instead of crashing.
func TestNoDriver(t *testing.T) {
	if Init() == nil {
		t.Skip("a CUDA driver is installed here")
	}
	check := func(what string, err error) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: no error without a driver", what)
			return
		}
		if !errors.Is(err, ErrNoDriver) || !strings.Contains(err.Error(), LibraryName) {
			t.Errorf("%s: error %q should match ErrNoDriver and name %s", what, err, LibraryName)
		}
	}
	check("Init again", Init())
	_, err := DriverVersion()
	check("DriverVersion", err)
	_, err = DeviceCount()
	check("DeviceCount", err)
	_, err = GetDevice(0)
	check("GetDevice", err)
	var zero Device
	_, err = zero.Name()
	check("Device{}.Name", err)
	_, err = zero.Properties()
	check("Device{}.Properties", err)
	_, err = zero.PrimaryContext()
	check("Device{}.PrimaryContext", err)

	var c Context
	if _, err := c.MemAlloc(1); err == nil {
		t.Error("MemAlloc on a zero Context succeeded")
	}
	if err := c.Release(); err == nil {
		t.Error("Release of a zero Context succeeded")
	}
}
