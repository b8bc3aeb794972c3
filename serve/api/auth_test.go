package api

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const goodSignal = `{"pid": 4242, "start_time": "2026-11-30T11:00:00Z", "signal": "TERM", "reason": "holding 30 GiB since yesterday"}`

// jsonAuth are the headers of a well-formed mutating request.
func jsonAuth(extra ...string) map[string]string {
	h := map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + token}
	for i := 0; i+1 < len(extra); i += 2 {
		if extra[i+1] == "" {
			delete(h, extra[i])
			continue
		}
		h[extra[i]] = extra[i+1]
	}
	return h
}

// TestMutationGuards runs every security rule of the mutating endpoints:
// each refused request gets its status and message, and the Backend is
// never called for it.
func TestMutationGuards(t *testing.T) {
	on := testOptions()
	off := testOptions()
	off.Mutations = false
	ro := testOptions()
	ro.ReadOnly = true
	noToken := testOptions()
	noToken.Token = nil
	for _, tc := range []struct {
		name      string
		opts      Options
		rq        req
		status    int
		msg       string
		challenge string
	}{
		{"disabled", off, req{method: "POST", target: "/api/v1/signal", body: goodSignal, header: jsonAuth()}, 403, "mutating endpoints are disabled", ""},
		{"disabled reload", off, req{method: "POST", target: "/api/v1/reload", header: jsonAuth()}, 403, "mutating endpoints are disabled", ""},
		{"read-only", ro, req{method: "POST", target: "/api/v1/signal", body: goodSignal, header: jsonAuth()}, 403, "the daemon is read-only: /api/v1/signal is refused", ""},
		{"read-only reload", ro, req{method: "POST", target: "/api/v1/reload", header: jsonAuth()}, 403, "read-only", ""},
		{"enabled without a token", noToken, req{method: "POST", target: "/api/v1/signal", body: goodSignal, header: jsonAuth()}, 403, "no token is configured", ""},
		{"no Authorization", on, req{method: "POST", target: "/api/v1/signal", body: goodSignal, header: jsonAuth("Authorization", "")}, 401, "missing Authorization: Bearer <token> header", `Bearer realm="vram"`},
		{"wrong token", on, req{method: "POST", target: "/api/v1/signal", body: goodSignal, header: jsonAuth("Authorization", "Bearer "+token+"x")}, 401, "invalid bearer token", `Bearer realm="vram", error="invalid_token"`},
		{"token prefix", on, req{method: "POST", target: "/api/v1/signal", body: goodSignal, header: jsonAuth("Authorization", "Bearer "+token[:10])}, 401, "invalid bearer token", `Bearer realm="vram", error="invalid_token"`},
		{"empty token", on, req{method: "POST", target: "/api/v1/signal", body: goodSignal, header: jsonAuth("Authorization", "Bearer")}, 401, "invalid bearer token", `Bearer realm="vram", error="invalid_token"`},
		{"basic auth", on, req{method: "POST", target: "/api/v1/reload", header: jsonAuth("Authorization", "Basic dTpw")}, 401, `Authorization scheme "Basic" is not Bearer`, `Bearer realm="vram", error="invalid_token"`},
		{"reload wrong token", on, req{method: "POST", target: "/api/v1/reload", header: jsonAuth("Authorization", "Bearer nope")}, 401, "invalid bearer token", `Bearer realm="vram", error="invalid_token"`},
		{"cross-origin", on, req{method: "POST", target: "/api/v1/signal", body: goodSignal, header: jsonAuth("Origin", "http://evil.example")}, 403, `Origin "http://evil.example" does not match the host "example.com"`, ""},
		{"cross-origin port", on, req{method: "POST", target: "/api/v1/signal", body: goodSignal, header: jsonAuth("Origin", "http://example.com:8080")}, 403, "does not match the host", ""},
		{"null origin", on, req{method: "POST", target: "/api/v1/reload", header: jsonAuth("Origin", "null")}, 403, `Origin "null" is not an origin`, ""},
		{"cross-site fetch", on, req{method: "POST", target: "/api/v1/signal", body: goodSignal, header: jsonAuth("Sec-Fetch-Site", "cross-site")}, 403, `Sec-Fetch-Site is "cross-site"`, ""},
		{"same-site fetch", on, req{method: "POST", target: "/api/v1/signal", body: goodSignal, header: jsonAuth("Sec-Fetch-Site", "same-site")}, 403, `Sec-Fetch-Site is "same-site"`, ""},
		{"no Content-Type", on, req{method: "POST", target: "/api/v1/signal", body: goodSignal, header: jsonAuth("Content-Type", "")}, 415, "Content-Type must be application/json; the request has none", ""},
		{"form Content-Type", on, req{method: "POST", target: "/api/v1/signal", body: "pid=4242", header: jsonAuth("Content-Type", "application/x-www-form-urlencoded")}, 415, `not "application/x-www-form-urlencoded"`, ""},
		{"text/plain", on, req{method: "POST", target: "/api/v1/signal", body: goodSignal, header: jsonAuth("Content-Type", "text/plain")}, 415, "must be application/json", ""},
		{"latin-1", on, req{method: "POST", target: "/api/v1/signal", body: goodSignal, header: jsonAuth("Content-Type", "application/json; charset=iso-8859-1")}, 415, `charset must be utf-8, not "iso-8859-1"`, ""},
		{"too large", on, req{method: "POST", target: "/api/v1/signal", body: `{"reason": "` + strings.Repeat("x", MaxBodyBytes) + `"}`, header: jsonAuth()}, 413, "larger than 65536 bytes", ""},
		{"empty body", on, req{method: "POST", target: "/api/v1/signal", header: jsonAuth()}, 400, "request body: empty; want a JSON object with the keys pid, start_time, signal, reason", ""},
		{"array", on, req{method: "POST", target: "/api/v1/signal", body: `[1]`, header: jsonAuth()}, 400, "not a JSON object", ""},
		{"null", on, req{method: "POST", target: "/api/v1/signal", body: `null`, header: jsonAuth()}, 400, "not a JSON object", ""},
		{"malformed", on, req{method: "POST", target: "/api/v1/signal", body: `{"pid": 42,}`, header: jsonAuth()}, 400, "malformed JSON at byte", ""},
		{"truncated", on, req{method: "POST", target: "/api/v1/signal", body: `{"pid": 42`, header: jsonAuth()}, 400, "request body:", ""},
		{"unknown field", on, req{method: "POST", target: "/api/v1/signal", body: `{"pid": 4242, "force": true}`, header: jsonAuth()}, 400, `unknown field "force"; the fields are pid, start_time, signal, reason`, ""},
		{"case-folded field", on, req{method: "POST", target: "/api/v1/signal", body: `{"PID": 4242}`, header: jsonAuth()}, 400, `unknown field "PID"`, ""},
		{"duplicate field", on, req{method: "POST", target: "/api/v1/signal", body: `{"pid": 4242, "pid": 1}`, header: jsonAuth()}, 400, `field "pid" is given twice`, ""},
		{"two values", on, req{method: "POST", target: "/api/v1/signal", body: goodSignal + ` {}`, header: jsonAuth()}, 400, "more than one JSON value", ""},
		{"pid as string", on, req{method: "POST", target: "/api/v1/signal", body: `{"pid": "4242"}`, header: jsonAuth()}, 400, `field "pid": a JSON string cannot be a uint32`, ""},
		{"pid negative", on, req{method: "POST", target: "/api/v1/signal", body: `{"pid": -1}`, header: jsonAuth()}, 400, `field "pid"`, ""},
		{"no pid", on, req{method: "POST", target: "/api/v1/signal", body: `{"signal": "TERM"}`, header: jsonAuth()}, 400, "pid is required", ""},
		{"pid 1", on, req{method: "POST", target: "/api/v1/signal", body: `{"pid": 1, "start_time": "2026-11-30T11:00:00Z", "signal": "KILL"}`, header: jsonAuth()}, 400, "pid 1 is init", ""},
		{"the daemon", on, req{method: "POST", target: "/api/v1/signal", body: fmt.Sprintf(`{"pid": %d, "start_time": "2026-11-30T11:00:00Z", "signal": "KILL"}`, os.Getpid()), header: jsonAuth()}, 400, "is the daemon itself", ""},
		{"no start_time", on, req{method: "POST", target: "/api/v1/signal", body: `{"pid": 4242, "signal": "TERM"}`, header: jsonAuth()}, 400, "start_time is required", ""},
		{"bad start_time", on, req{method: "POST", target: "/api/v1/signal", body: `{"pid": 4242, "start_time": "yesterday", "signal": "TERM"}`, header: jsonAuth()}, 400, "request body:", ""},
		{"no signal", on, req{method: "POST", target: "/api/v1/signal", body: `{"pid": 4242, "start_time": "2026-11-30T11:00:00Z"}`, header: jsonAuth()}, 400, `signal is required: "TERM" or "KILL"`, ""},
		{"bad signal", on, req{method: "POST", target: "/api/v1/signal", body: `{"pid": 4242, "start_time": "2026-11-30T11:00:00Z", "signal": "SIGSTOP"}`, header: jsonAuth()}, 400, `signal must be "TERM" or "KILL", not "SIGSTOP"`, ""},
		{"lower-case signal", on, req{method: "POST", target: "/api/v1/signal", body: `{"pid": 4242, "start_time": "2026-11-30T11:00:00Z", "signal": "term"}`, header: jsonAuth()}, 400, `not "term"`, ""},
		{"reason with a newline", on, req{method: "POST", target: "/api/v1/signal", body: `{"pid": 4242, "start_time": "2026-11-30T11:00:00Z", "signal": "TERM", "reason": "a\nb"}`, header: jsonAuth()}, 400, "control character", ""},
		{"reason too long", on, req{method: "POST", target: "/api/v1/signal", body: `{"pid": 4242, "start_time": "2026-11-30T11:00:00Z", "signal": "TERM", "reason": "` + strings.Repeat("x", 1025) + `"}`, header: jsonAuth()}, 400, "reason is 1025 bytes; at most 1024", ""},
		{"query on signal", on, req{method: "POST", target: "/api/v1/signal?pid=4", body: goodSignal, header: jsonAuth()}, 400, `unknown query parameter "pid"`, ""},
		{"reload with fields", on, req{method: "POST", target: "/api/v1/reload", body: `{"file": "/etc/passwd"}`, header: jsonAuth()}, 400, `unknown field "file"; this request takes none`, ""},
		{"reload with text", on, req{method: "POST", target: "/api/v1/reload", body: `now`, header: jsonAuth("Content-Type", "text/plain")}, 415, "must be application/json", ""},
		{"reload with garbage", on, req{method: "POST", target: "/api/v1/reload", body: `now`, header: jsonAuth()}, 400, "not a JSON object", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			w := serve(t, Handler(f, tc.opts), tc.rq)
			if w.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tc.status, w.Body)
			}
			if e := errorDoc(t, w); !strings.Contains(e.Message, tc.msg) {
				t.Errorf("message %q does not contain %q", e.Message, tc.msg)
			}
			if got := w.Header().Get("WWW-Authenticate"); got != tc.challenge {
				t.Errorf("WWW-Authenticate %q, want %q", got, tc.challenge)
			}
			if s, r := f.calls(); s+r != 0 {
				t.Errorf("the Backend was called: %d signals, %d reloads", s, r)
			}
		})
	}
}

func TestMutationsAccepted(t *testing.T) {
	for _, tc := range []struct {
		name string
		rq   req
	}{
		{"signal", req{method: "POST", target: "/api/v1/signal", body: goodSignal, header: jsonAuth()}},
		{"lower-case scheme, charset", req{method: "POST", target: "/api/v1/signal", body: goodSignal, header: jsonAuth("Authorization", "bearer "+token, "Content-Type", "application/json; charset=UTF-8")}},
		{"same origin", req{method: "POST", target: "/api/v1/signal", body: goodSignal, header: jsonAuth("Origin", "http://example.com", "Sec-Fetch-Site", "same-origin")}},
		{"reload, empty body", req{method: "POST", target: "/api/v1/reload", header: jsonAuth("Content-Type", "")}},
		{"reload, {}", req{method: "POST", target: "/api/v1/reload", body: "{}\n", header: jsonAuth()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			var log strings.Builder
			opts := testOptions()
			opts.Logger = newTestLogger(&log)
			w := serve(t, Handler(f, opts), tc.rq)
			if w.Code != 200 {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			if strings.HasSuffix(tc.rq.target, "reload") {
				var r ReloadResponse
				decodeBody(t, w, &r)
				if !r.OK || r.Schema != Schema || f.reloads != 1 {
					t.Fatalf("%+v, %d reloads", r, f.reloads)
				}
				return
			}
			var r SignalResponse
			decodeBody(t, w, &r)
			want := SignalRequest{PID: 4242, StartTime: time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC), Signal: "TERM", Reason: "holding 30 GiB since yesterday"}
			if len(f.signals) != 1 || f.signals[0] != want {
				t.Fatalf("backend got %+v, want %+v", f.signals, want)
			}
			if r.Schema != Schema || r.Action.PID != 4242 || r.Action.Action != "term" || r.Action.Result != "sent" {
				t.Fatalf("%+v", r)
			}
			if !strings.Contains(log.String(), "signal requested") || !strings.Contains(log.String(), "pid=4242") {
				t.Errorf("the signal is not in the log: %s", log.String())
			}
		})
	}
}

func TestMutationBackendErrors(t *testing.T) {
	for _, tc := range []struct {
		err    error
		status int
		msg    string
	}{
		{fmt.Errorf("process 4242 started at 11:05, not 11:00: %w", ErrConflict), 409, "process 4242 started at 11:05, not 11:00"},
		{fmt.Errorf("no process 4242 holds GPU memory here: %w", ErrNotFound), 404, "no process 4242 holds GPU memory here"},
		{fmt.Errorf("policy file: line 3: %w", ErrInvalid), 400, "policy file: line 3"},
		{fmt.Errorf("pidfd_open: operation not permitted"), 500, "internal error"},
	} {
		f := newFake()
		f.signalErr, f.reloadErr = tc.err, tc.err
		h := Handler(f, testOptions())
		for _, rq := range []req{
			{method: "POST", target: "/api/v1/signal", body: goodSignal, header: jsonAuth()},
			{method: "POST", target: "/api/v1/reload", header: jsonAuth()},
		} {
			w := serve(t, h, rq)
			if w.Code != tc.status {
				t.Errorf("%s with %v: %d, want %d", rq.target, tc.err, w.Code, tc.status)
				continue
			}
			if e := errorDoc(t, w); !strings.Contains(e.Message, tc.msg) {
				t.Errorf("%s: %q, want %q", rq.target, e.Message, tc.msg)
			}
		}
	}
}

func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // WriteFile's mode passes through the umask
			t.Fatal(err)
		}
		return p
	}
	long := "0123456789abcdef0123"
	for _, tc := range []struct {
		name    string
		path    string
		want    string
		wantErr string
	}{
		{"plain", write("plain", long, 0o600), long, ""},
		{"newline", write("newline", long+"\n", 0o600), long, ""},
		{"crlf", write("crlf", long+"\r\n", 0o400), long, ""},
		{"group readable", write("g", long, 0o640), "", "mode 0640 lets other users read or change it; run chmod 600 "},
		{"other readable", write("o", long, 0o604), "", "run chmod 600"},
		{"group writable", write("gw", long, 0o620), "", "run chmod 600"},
		{"empty", write("empty", "", 0o600), "", "the token is empty"},
		{"whitespace", write("ws", " \t\n", 0o600), "", "the token is empty"},
		{"two newlines", write("nn", long+"\n\n", 0o600), "", "is not a visible ASCII character"},
		{"inner space", write("space", "0123456789 abcdefgh", 0o600), "", "byte 10 of the token (' ') is not a visible ASCII character"},
		{"non-ASCII", write("utf8", "0123456789abcdéfgh", 0o600), "", "is not a visible ASCII character"},
		{"short", write("short", "hunter2\n", 0o600), "", "the token is 7 characters; use at least 16"},
		{"too large", write("big", strings.Repeat("x", MaxTokenFile+1), 0o600), "", "4097 bytes; a token file holds one token of at most 4096 bytes"},
		{"directory", dir, "", "not a regular file"},
		{"missing", filepath.Join(dir, "nope"), "", "no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReadTokenFile(tc.path)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.path) {
					t.Errorf("error %q does not name the path", err)
				}
				return
			}
			if err != nil || string(got) != tc.want {
				t.Fatalf("%q, %v; want %q", got, err, tc.want)
			}
		})
	}
	// A symbolic link (how Kubernetes mounts a Secret) is followed: the
	// target's mode is what counts.
	link := filepath.Join(dir, "link")
	if err := os.Symlink(filepath.Join(dir, "plain"), link); err != nil {
		t.Fatal(err)
	}
	if got, err := ReadTokenFile(link); err != nil || string(got) != long {
		t.Errorf("through a link: %q, %v", got, err)
	}
}

func TestCheckListen(t *testing.T) {
	for _, tc := range []struct {
		addr    string
		remote  bool
		wantErr string
	}{
		{"127.0.0.1:9400", false, ""},
		{"127.1.2.3:9400", false, ""},
		{"[::1]:9400", false, ""},
		{"localhost:9400", false, ""},
		{"LocalHost.:9400", false, ""},
		{"127.0.0.1:0", false, ""},
		{"[::ffff:127.0.0.1]:9400", false, ""},
		{":9400", false, "an empty host listens on every interface"},
		{"0.0.0.0:9400", false, "0.0.0.0 listens on every interface"},
		{"[::]:9400", false, ":: listens on every interface"},
		{"10.0.0.7:9400", false, `host "10.0.0.7" is not a loopback address`},
		{"node-1:9400", false, `host "node-1" is not a loopback address`},
		{"localhost.evil.example:9400", false, "not a loopback address"},
		{":9400", true, ""},
		{"10.0.0.7:9400", true, ""},
		{"127.0.0.1", false, "want host:port"},
		{"127.0.0.1:http", false, `port "http" is not a number`},
		{"127.0.0.1:70000", false, "port \"70000\""},
		{"127.0.0.1:", false, `port ""`},
	} {
		err := CheckListen(tc.addr, tc.remote)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%q remote=%v: %v", tc.addr, tc.remote, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%q remote=%v: error %v, want %q", tc.addr, tc.remote, err, tc.wantErr)
		case tc.wantErr != "" && !strings.Contains(err.Error(), tc.addr):
			t.Errorf("%q: error %q does not name the address", tc.addr, err)
		}
	}
}

// TestTokenComparisonIsOfHashes checks the property the constant-time
// comparison relies on: the handler keeps only the token's hash.
func TestTokenComparisonIsOfHashes(t *testing.T) {
	h := Handler(newFake(), testOptions()).(*handler)
	if h.tokenSum == [32]byte{} {
		t.Fatal("no token hash")
	}
	for _, tok := range []string{"", token[:len(token)-1], token + " ", strings.ToUpper(token)} {
		r := serve(t, h, req{method: "POST", target: "/api/v1/reload", header: jsonAuth("Authorization", "Bearer "+tok)})
		if r.Code != 401 && !(tok == token+" " && r.Code == 200) {
			t.Errorf("token %q: %d", tok, r.Code)
		}
	}
}
