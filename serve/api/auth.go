package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"
)

const (
	// MaxTokenFile is the largest token file ReadTokenFile reads.
	MaxTokenFile = 4 << 10
	// MinTokenLen is the shortest token ReadTokenFile accepts: a guessable
	// token would make the mutating endpoints open to anyone on the node.
	MinTokenLen = 16
)

// ReadTokenFile reads the bearer token of the mutating endpoints from a
// file. It refuses a file that anyone but its owner may read or write
// (any group or other permission bit), one that is not a regular file or
// is larger than MaxTokenFile, and a token that is empty, shorter than
// MinTokenLen, or holds anything but visible ASCII (the characters of a
// bearer token). One trailing newline (LF or CRLF) is trimmed. Every error
// names the path and the problem.
func ReadTokenFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	switch {
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("token file %s: not a regular file (%v)", path, fi.Mode().Type())
	case fi.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("token file %s: mode %#o lets other users read or change it; run chmod 600 %s", path, fi.Mode().Perm(), path)
	case fi.Size() > MaxTokenFile:
		return nil, fmt.Errorf("token file %s: %d bytes; a token file holds one token of at most %d bytes", path, fi.Size(), MaxTokenFile)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxTokenFile+1))
	if err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	if len(b) > MaxTokenFile {
		return nil, fmt.Errorf("token file %s: more than %d bytes; a token file holds one token", path, MaxTokenFile)
	}
	tok, err := parseToken(b)
	if err != nil {
		return nil, fmt.Errorf("token file %s: %w", path, err)
	}
	return tok, nil
}

// parseToken trims one trailing newline and checks what is left.
func parseToken(b []byte) ([]byte, error) {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		b = b[:n-1]
		if n := len(b); n > 0 && b[n-1] == '\r' {
			b = b[:n-1]
		}
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil, errors.New("the token is empty; write a random token into it, e.g. head -c 32 /dev/urandom | base64 > FILE")
	}
	for i, c := range b {
		if c <= ' ' || c > '~' {
			return nil, fmt.Errorf("byte %d of the token (%q) is not a visible ASCII character; a token is one word (letters, digits, punctuation)", i, c)
		}
	}
	if len(b) < MinTokenLen {
		return nil, fmt.Errorf("the token is %d characters; use at least %d, e.g. head -c 32 /dev/urandom | base64 > FILE", len(b), MinTokenLen)
	}
	return b, nil
}

// CheckListen checks that the daemon's listen address (host:port) is
// reachable from this host only, unless allowRemote: the host must be a
// loopback address (127.0.0.0/8, ::1) or "localhost". An empty host
// (":9400") listens on every interface and counts as remote, as do
// 0.0.0.0, ::, other addresses and host names.
func CheckListen(addr string, allowRemote bool) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: want host:port, like 127.0.0.1:9400: %w", addr, err)
	}
	// Port 0 (the kernel picks a free port) is fine; tests use it.
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("listen address %q: port %q is not a number from 0 to 65535", addr, port)
	}
	if allowRemote || isLoopbackHost(host) {
		return nil
	}
	what := fmt.Sprintf("host %q is not a loopback address", host)
	switch a, err := netip.ParseAddr(host); {
	case host == "":
		what = "an empty host listens on every interface"
	case err == nil && a.IsUnspecified():
		what = fmt.Sprintf("%s listens on every interface", host)
	}
	return fmt.Errorf("listen address %q: %s, so other hosts could reach the API; bind to 127.0.0.1 or allow remote access explicitly (http.allow_remote in the config)", addr, what)
}

// isLoopbackHost: "localhost" (any case, optional trailing dot) or a
// loopback IP address (a zone is allowed: "::1%lo").
func isLoopbackHost(host string) bool {
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// hostOnly drops the port of a Host header and the brackets of an IPv6
// address.
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}

func isIPLiteral(host string) bool {
	_, err := netip.ParseAddr(host)
	return err == nil
}

// mutating guards a mutating route with the layers of the package
// documentation: enabled, same origin, bearer token. The body is the
// route's own business.
func (h *handler) mutating(next apiFunc) apiFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		refuse := func(status int, format string, args ...any) error {
			e := errorf(status, format, args...)
			h.log.Warn("api: mutation refused", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr, "status", status, "why", e.Message)
			return e
		}
		switch {
		case h.o.ReadOnly:
			return refuse(http.StatusForbidden, "the daemon is read-only: %s is refused (read_only in the config, or --read-only)", r.URL.Path)
		case !h.o.Mutations:
			return refuse(http.StatusForbidden, "mutating endpoints are disabled on this daemon; enable http.mutations (with a token_file) in its config")
		case len(h.o.Token) == 0:
			return refuse(http.StatusForbidden, "mutating endpoints are enabled but no token is configured, so every request is refused")
		}
		if why := crossOrigin(r); why != "" {
			return refuse(http.StatusForbidden, "cross-origin request refused: %s", why)
		}
		if why, invalid := h.checkToken(r); why != "" {
			challenge := `Bearer realm="vram"`
			if invalid {
				challenge += `, error="invalid_token"`
			}
			w.Header().Set("WWW-Authenticate", challenge)
			return refuse(http.StatusUnauthorized, "%s", why)
		}
		return next(w, r)
	}
}

// crossOrigin says why a request looks cross-origin, or "" if it does not.
// Browsers send Sec-Fetch-Site (since 2023) and Origin on a POST; other
// clients send neither.
func crossOrigin(r *http.Request) string {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return fmt.Sprintf("Sec-Fetch-Site is %q; mutations are accepted from the daemon's own pages only", site)
	}
	origin, ok := r.Header["Origin"]
	if !ok {
		return ""
	}
	if len(origin) != 1 {
		return "more than one Origin header"
	}
	u, err := url.Parse(origin[0])
	if err != nil || origin[0] == "null" || u.Host == "" {
		return fmt.Sprintf("Origin %q is not an origin this daemon serves", origin[0])
	}
	if !strings.EqualFold(u.Host, r.Host) {
		return fmt.Sprintf("Origin %q does not match the host %q the request was sent to", origin[0], r.Host)
	}
	return ""
}

// checkToken compares the request's bearer token with Options.Token. The
// comparison is of SHA-256 sums, in constant time, so neither the token's
// bytes nor its length show in the time it takes. It returns why the
// request is refused ("" when it is not) and whether a token was given
// (then it was wrong).
func (h *handler) checkToken(r *http.Request) (why string, invalid bool) {
	auths := r.Header.Values("Authorization")
	if len(auths) == 0 {
		return "missing Authorization: Bearer <token> header", false
	}
	if len(auths) > 1 {
		return "more than one Authorization header", true
	}
	scheme, tok, _ := strings.Cut(strings.TrimSpace(auths[0]), " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return fmt.Sprintf("Authorization scheme %q is not Bearer", scheme), true
	}
	tok = strings.TrimSpace(tok)
	sum := sha256.Sum256([]byte(tok))
	if subtle.ConstantTimeCompare(sum[:], h.tokenSum[:]) != 1 {
		return "invalid bearer token", true
	}
	return "", false
}

// NewServer returns an http.Server for h with timeouts that suit it:
// bounds on reading a request's headers and whole request, on writing a
// response, and on idle connections. An event stream outlives them: the
// server stops applying the read timeout once the handler runs, and each
// stream write sets its own write deadline (TestEventsOutliveServerTimeouts).
// The write timeout leaves room for a read that takes DefaultQueryTimeout.
// Errors of the server itself go to log at Warn level.
func NewServer(addr string, h http.Handler, log *slog.Logger) *http.Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      DefaultQueryTimeout + 30*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}
