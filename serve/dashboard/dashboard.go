package dashboard

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed static
var static embed.FS

// CSP is the Content-Security-Policy the dashboard is written for: every
// script, style, image and connection from the page's own origin, nothing
// inline. Handler sets it on its answers unless the caller already did.
const CSP = "default-src 'self'; base-uri 'none'; frame-ancestors 'none'; form-action 'none'"

// file is one embedded file, ready to serve.
type file struct {
	name        string // base name, for http.ServeContent (Content-Type is set before it)
	body        []byte
	contentType string
	etag        string // strong validator: a hash of body
}

// contentTypes fixes the types of the files the dashboard is made of: the
// mime package would also read the host's mime.types, which differ between
// distributions (application/javascript, application/x-javascript, ...).
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
	".png":  "image/png",
	".json": "application/json",
}

// files maps a request path ("/", "/app.js") to its embedded file. It is
// built once from the embedded tree, which cannot change at run time.
var files = mustLoad()

func mustLoad() map[string]*file {
	m, err := load(static, "static")
	if err != nil {
		// The tree is embedded at build time; failing here means the
		// package itself is broken, which the package's tests catch.
		panic(fmt.Sprintf("dashboard: reading embedded files: %v", err))
	}
	return m
}

// load reads every regular file under root of fsys into a table keyed by its
// URL path, index.html also under "/".
func load(fsys fs.FS, root string) (map[string]*file, error) {
	m := make(map[string]*file)
	err := fs.WalkDir(fsys, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		body, err := fs.ReadFile(fsys, p)
		if err != nil {
			return fmt.Errorf("reading %s: %w", p, err)
		}
		ct := contentTypes[path.Ext(p)]
		if ct == "" {
			ct = mime.TypeByExtension(path.Ext(p))
		}
		if ct == "" {
			ct = http.DetectContentType(body)
		}
		sum := sha256.Sum256(body)
		f := &file{
			name:        path.Base(p),
			body:        body,
			contentType: ct,
			etag:        `"` + hex.EncodeToString(sum[:12]) + `"`,
		}
		rel := strings.TrimPrefix(p, root)
		m[rel] = f
		if path.Base(rel) == "index.html" {
			m[strings.TrimSuffix(rel, "index.html")] = f
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if m["/"] == nil {
		return nil, fmt.Errorf("no %s/index.html", root)
	}
	return m, nil
}

// Handler serves the dashboard's embedded files: index.html at "/", its
// script, style sheet and icon beside it. Every other path is 404 (there is
// no directory listing), methods other than GET and HEAD are 405. Answers
// carry a strong ETag and "Cache-Control: no-cache", so a browser revalidates
// and gets 304 until the binary changes.
func Handler() http.Handler {
	return http.HandlerFunc(serve)
}

func serve(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed: the dashboard serves GET and HEAD", http.StatusMethodNotAllowed)
		return
	}
	f := files[r.URL.Path]
	if f == nil {
		http.Error(w, "not found: "+r.URL.Path, http.StatusNotFound)
		return
	}
	h.Set("Content-Type", f.contentType)
	h.Set("ETag", f.etag)
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	if h.Get("Content-Security-Policy") == "" {
		h.Set("Content-Security-Policy", CSP)
	}
	// ServeContent answers If-None-Match (304), Range and HEAD. A zero
	// modification time leaves Last-Modified out: the ETag is the validator.
	http.ServeContent(w, r, f.name, time.Time{}, bytes.NewReader(f.body))
}
