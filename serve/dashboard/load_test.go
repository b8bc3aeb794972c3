package dashboard

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestLoad(t *testing.T) {
	tests := []struct {
		name    string
		fs      fstest.MapFS
		paths   map[string]string // URL path -> content type
		wantErr string
	}{
		{
			name: "index and friends",
			fs: fstest.MapFS{
				"static/index.html":     {Data: []byte("<!doctype html>")},
				"static/app.js":         {Data: []byte("1")},
				"static/sub/index.html": {Data: []byte("<p>")},
				"static/data.bin":       {Data: []byte{0, 1, 2}},
			},
			paths: map[string]string{
				"/": "text/html; charset=utf-8", "/index.html": "text/html; charset=utf-8",
				"/app.js": "text/javascript; charset=utf-8", "/sub/": "text/html; charset=utf-8",
				"/sub/index.html": "text/html; charset=utf-8", "/data.bin": "application/octet-stream",
			},
		},
		{
			name:    "no index",
			fs:      fstest.MapFS{"static/app.js": {Data: []byte("1")}},
			wantErr: "no static/index.html",
		},
		{
			name:    "no tree",
			fs:      fstest.MapFS{},
			wantErr: "static",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := load(tt.fs, "static")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(m) != len(tt.paths) {
				t.Errorf("%d paths, want %d", len(m), len(tt.paths))
			}
			for p, ct := range tt.paths {
				if f := m[p]; f == nil || f.contentType != ct {
					t.Errorf("%s: %+v, want content type %s", p, f, ct)
				}
			}
		})
	}
}
