package dashboard_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/vramhq/vram/serve/dashboard"
)

func TestHandler(t *testing.T) {
	h := dashboard.Handler()
	tests := []struct {
		method, path string
		status       int
		ctype        string
		body         string // a part of the body
	}{
		{"GET", "/", 200, "text/html; charset=utf-8", `<script src="app.js" defer></script>`},
		{"GET", "/index.html", 200, "text/html; charset=utf-8", `<title>vram</title>`},
		{"GET", "/app.js", 200, "text/javascript; charset=utf-8", `'use strict';`},
		{"GET", "/style.css", 200, "text/css; charset=utf-8", `:root {`},
		{"GET", "/favicon.svg", 200, "image/svg+xml", `<svg`},
		{"HEAD", "/", 200, "text/html; charset=utf-8", ``},
		{"GET", "/static/", 404, "", "not found"},
		{"GET", "/static/app.js", 404, "", "not found"},
		{"GET", "/app.js/", 404, "", "not found"},
		{"GET", "/missing.html", 404, "", "not found"},
		{"GET", "/api/v1/state", 404, "", "not found"},
		{"POST", "/", 405, "", "method not allowed"},
		{"DELETE", "/app.js", 405, "", "method not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
			res := rec.Result()
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d (body %q)", res.StatusCode, tt.status, body)
			}
			if !strings.Contains(string(body), tt.body) {
				t.Errorf("body does not contain %q", tt.body)
			}
			if tt.method == "HEAD" && len(body) != 0 {
				t.Errorf("HEAD answered with %d bytes of body", len(body))
			}
			if tt.status == 405 && res.Header.Get("Allow") != "GET, HEAD" {
				t.Errorf("405 without Allow: GET, HEAD (got %q)", res.Header.Get("Allow"))
			}
			if tt.status != 200 {
				return
			}
			for k, want := range map[string]string{
				"Content-Type":            tt.ctype,
				"Cache-Control":           "no-cache",
				"X-Content-Type-Options":  "nosniff",
				"Content-Security-Policy": dashboard.CSP,
			} {
				if got := res.Header.Get(k); got != want {
					t.Errorf("%s: %q, want %q", k, got, want)
				}
			}
			if et := res.Header.Get("ETag"); !regexp.MustCompile(`^"[0-9a-f]{24}"$`).MatchString(et) {
				t.Errorf("ETag %q, want a quoted hash", et)
			}
		})
	}
}

// A browser that has the page revalidates it and gets 304 until the binary
// changes.
func TestHandlerRevalidation(t *testing.T) {
	h := dashboard.Handler()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/app.js", nil))
	etag := rec.Header().Get("ETag")
	for _, tt := range []struct {
		inm    string
		status int
	}{
		{etag, http.StatusNotModified},
		{`W/` + etag, http.StatusNotModified},
		{`"something-else"`, http.StatusOK},
		{`*`, http.StatusNotModified},
	} {
		req := httptest.NewRequest("GET", "/app.js", nil)
		req.Header.Set("If-None-Match", tt.inm)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != tt.status {
			t.Errorf("If-None-Match %s: status %d, want %d", tt.inm, rec.Code, tt.status)
		}
		if tt.status == http.StatusNotModified && rec.Body.Len() != 0 {
			t.Errorf("If-None-Match %s: 304 with a body", tt.inm)
		}
	}
	// Each file has its own validator.
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/style.css", nil))
	if rec.Header().Get("ETag") == etag {
		t.Error("app.js and style.css have the same ETag")
	}
}

// The API sets its own policy on every answer; the dashboard keeps it.
func TestHandlerKeepsCallersCSP(t *testing.T) {
	const policy = "default-src 'self'; frame-ancestors 'none'"
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", policy)
		dashboard.Handler().ServeHTTP(w, r)
	})
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if got := rec.Header().Values("Content-Security-Policy"); len(got) != 1 || got[0] != policy {
		t.Errorf("Content-Security-Policy %q, want the caller's %q alone", got, policy)
	}
}

func FuzzHandler(f *testing.F) {
	for _, s := range []string{"/", "/app.js", "/static/index.html", "/../static/app.js", "/%2e%2e/", "//x", "/index.html/.."} {
		f.Add("GET", s)
	}
	f.Add("POST", "/")
	known := map[string]bool{"/": true, "/index.html": true, "/app.js": true, "/style.css": true, "/favicon.svg": true}
	h := dashboard.Handler()
	f.Fuzz(func(t *testing.T, method, path string) {
		req, err := http.NewRequest(method, "http://vram.test/", nil)
		if err != nil {
			return
		}
		req.URL.Path = path
		method = req.Method // "" is GET
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		switch {
		case method != "GET" && method != "HEAD":
			if rec.Code != 405 {
				t.Fatalf("%s %q: status %d, want 405", method, path, rec.Code)
			}
		case known[path]:
			if rec.Code != 200 {
				t.Fatalf("%s %q: status %d, want 200", method, path, rec.Code)
			}
		default:
			if rec.Code != 404 {
				t.Fatalf("%s %q: status %d, want 404", method, path, rec.Code)
			}
		}
	})
}

// The page loads nothing from anywhere else and has nothing inline, so that
// it runs under default-src 'self'; and the ids app.js looks up exist.
func TestStaticFiles(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("static", name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	html, js, css := read("index.html"), read("app.js"), read("style.css")
	const svgNS = "http://www.w3.org/2000/svg" // a name, never fetched
	for name, text := range map[string]string{"index.html": html, "app.js": js, "style.css": css, "favicon.svg": read("favicon.svg")} {
		text = strings.ReplaceAll(text, svgNS, "")
		for _, re := range []string{`(?i)https?:`, `(?i)(src|href)\s*=\s*["']//`, `(?i)url\(\s*["']?(//|data:)`, `(?i)@import`, `(?i)\beval\(`, `new Function\(`} {
			if m := regexp.MustCompile(re).FindString(text); m != "" {
				t.Errorf("%s contains %q (matching %s): the page must load nothing from elsewhere", name, m, re)
			}
		}
	}
	for _, m := range regexp.MustCompile(`(?is)<script([^>]*)>(.*?)</script>`).FindAllStringSubmatch(html, -1) {
		if !strings.Contains(m[1], "src=") || strings.TrimSpace(m[2]) != "" {
			t.Errorf("inline script in index.html: %q", m[0])
		}
	}
	for _, re := range []string{`(?i)\sstyle\s*=`, `(?i)\son[a-z]+\s*=`, `(?i)<style`, `(?i)javascript:`} {
		if m := regexp.MustCompile(re).FindString(html); m != "" {
			t.Errorf("index.html has inline style or script (%q)", m)
		}
	}
	// Relative URLs only, so the page works behind a path prefix.
	if m := regexp.MustCompile(`['"]/(api|events)`).FindString(js); m != "" {
		t.Errorf("app.js uses an absolute URL (%q...)", m)
	}
	for _, route := range []string{`'api/v1/state'`, `'api/v1/actions?from=-24h'`, `'api/v1/history/'`, `'devices/'`,
		`'processes/'`, `'api/v1/signal'`, `new EventSource('events')`} {
		if !strings.Contains(js, route) {
			t.Errorf("app.js does not use %s", route)
		}
	}
	ids := map[string]bool{}
	for _, m := range regexp.MustCompile(`\sid="([^"]+)"`).FindAllStringSubmatch(html, -1) {
		if ids[m[1]] {
			t.Errorf("index.html: id %q used twice", m[1])
		}
		ids[m[1]] = true
	}
	for _, m := range regexp.MustCompile(`\$\('#([\w-]+)|querySelector(?:All)?\('#([\w-]+)`).FindAllStringSubmatch(js, -1) {
		id := m[1] + m[2]
		if !ids[id] {
			t.Errorf("app.js looks up #%s, which index.html does not have", id)
		}
	}
}
