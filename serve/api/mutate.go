package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxReason bounds SignalRequest.Reason, which goes to the audit trail.
const maxReason = 1024

// signalFields are SignalRequest's JSON keys, exactly as spelled.
var signalFields = []string{"pid", "start_time", "signal", "reason"}

// readBody reads a request body that must be JSON: 415 for another
// Content-Type (or a charset other than UTF-8), 413 past MaxBodyBytes.
// An empty body with no Content-Type is returned empty when emptyOK.
func readBody(w http.ResponseWriter, r *http.Request, emptyOK bool) ([]byte, error) {
	ct := r.Header.Get("Content-Type")
	if ct == "" && emptyOK && r.ContentLength == 0 {
		return nil, nil
	}
	if ct == "" {
		return nil, errorf(http.StatusUnsupportedMediaType, "Content-Type must be application/json; the request has none")
	}
	mt, ps, err := mime.ParseMediaType(ct)
	if err != nil || mt != "application/json" {
		return nil, errorf(http.StatusUnsupportedMediaType, "Content-Type must be application/json, not %q", ct)
	}
	if cs, ok := ps["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return nil, errorf(http.StatusUnsupportedMediaType, "Content-Type charset must be utf-8, not %q", cs)
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return nil, errorf(http.StatusRequestEntityTooLarge, "request body is larger than %d bytes", MaxBodyBytes)
	case err != nil:
		return nil, fmt.Errorf("reading the request body: %w", err)
	}
	return b, nil
}

// decodeSignal reads a SignalRequest from a body and checks it: one JSON
// object, each of its keys one of signalFields, spelled exactly, at most
// once; then the request's own rules. It returns the *Error to answer with.
func decodeSignal(body []byte) (SignalRequest, error) {
	var req SignalRequest
	if err := decodeObject(body, signalFields, &req); err != nil {
		return req, err
	}
	bad := func(format string, args ...any) (SignalRequest, error) {
		return req, errorf(http.StatusBadRequest, format, args...)
	}
	switch {
	case req.PID == 0:
		return bad("pid is required: the process ID to signal")
	case req.PID == 1:
		return bad("pid 1 is init; it is never signalled")
	case int64(req.PID) == int64(os.Getpid()):
		return bad("pid %d is the daemon itself; it is never signalled", req.PID)
	case req.StartTime.IsZero():
		return bad("start_time is required: the process's start time as GET /api/v1/state shows it, so that the daemon can check that the PID still names the same process")
	case req.Signal == "":
		return bad(`signal is required: "TERM" or "KILL"`)
	case req.Signal != "TERM" && req.Signal != "KILL":
		return bad(`signal must be "TERM" or "KILL", not %q`, req.Signal)
	case len(req.Reason) > maxReason:
		return bad("reason is %d bytes; at most %d", len(req.Reason), maxReason)
	case !utf8.ValidString(req.Reason):
		return bad("reason is not valid UTF-8")
	case strings.ContainsFunc(req.Reason, unicode.IsControl):
		return bad("reason contains a control character; it is one line of text")
	}
	return req, nil
}

// decodeObject decodes body, which must be exactly one JSON object whose
// keys are among fields (exact spelling, each once), into v. encoding/json
// alone would match keys case-insensitively and keep the last of two
// equal keys; the first pass refuses both, so what is audited is what was
// sent.
func decodeObject(body []byte, fields []string, v any) error {
	bad := func(format string, args ...any) error {
		return errorf(http.StatusBadRequest, "request body: "+format, args...)
	}
	want, known := "an empty JSON object", "this request takes none"
	if len(fields) > 0 {
		want = "a JSON object with the keys " + strings.Join(fields, ", ")
		known = "the fields are " + strings.Join(fields, ", ")
	}
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return bad("empty; want %s", want)
	}
	if trimmed[0] != '{' {
		return bad("not a JSON object; want %s", want)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if _, err := dec.Token(); err != nil { // the '{'
		return jsonError(err)
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return jsonError(err)
		}
		key, _ := t.(string) // inside an object, the decoder returns keys as strings
		switch {
		case !slices.Contains(fields, key):
			return bad("unknown field %q; %s", key, known)
		case seen[key]:
			return bad("field %q is given twice", key)
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return jsonError(err)
		}
	}
	if _, err := dec.Token(); err != nil { // the '}'
		return jsonError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return bad("more than one JSON value; send one object")
	}
	strict := json.NewDecoder(bytes.NewReader(body))
	strict.DisallowUnknownFields()
	if err := strict.Decode(v); err != nil {
		return jsonError(err)
	}
	return nil
}

// jsonError turns a decoding error into a 400 that says where and what.
func jsonError(err error) error {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		return errorf(http.StatusBadRequest, "request body: malformed JSON at byte %d: %v", syn.Offset, syn)
	case errors.As(err, &typ) && typ.Field != "":
		return errorf(http.StatusBadRequest, "request body: field %q: a JSON %s cannot be a %s", typ.Field, typ.Value, typ.Type)
	case errors.As(err, &typ):
		return errorf(http.StatusBadRequest, "request body: a JSON %s cannot be a %s", typ.Value, typ.Type)
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return errorf(http.StatusBadRequest, "request body: the JSON ends early")
	}
	return errorf(http.StatusBadRequest, "request body: %v", err)
}

func (h *handler) postSignal(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r); err != nil {
		return err
	}
	body, err := readBody(w, r, false)
	if err != nil {
		return err
	}
	req, err := decodeSignal(body)
	if err != nil {
		return err
	}
	h.log.Info("api: signal requested", "pid", req.PID, "start_time", req.StartTime, "signal", req.Signal, "reason", req.Reason, "remote", r.RemoteAddr)
	if why := h.notSignalable(req); why != "" {
		h.log.Warn("api: signal refused", "pid", req.PID, "signal", req.Signal, "why", why)
		return errorf(http.StatusConflict, "PID %d: %s", req.PID, why)
	}
	res, err := h.b.Signal(r.Context(), req)
	if err != nil {
		h.log.Warn("api: signal not sent", "pid", req.PID, "signal", req.Signal, "err", err)
		return fmt.Errorf("signal %s to pid %d: %w", req.Signal, req.PID, err)
	}
	h.log.Info("api: signal done", "pid", req.PID, "signal", req.Signal, "action", res.Action.Action, "result", res.Action.Result)
	h.writeJSON(w, http.StatusOK, SignalResponse{Schema: Schema, SignalResult: res})
	return nil
}

// notSignalable says why the process a request names, as the latest State
// shows it, cannot be signalled; "" when it can or the State does not list
// it (the Backend then answers).
func (h *handler) notSignalable(req SignalRequest) string {
	s, ok := h.b.State()
	if !ok {
		return ""
	}
	for _, p := range s.Processes {
		if p.PID == req.PID && p.StartTime.Equal(req.StartTime) {
			return notSignalable(p, os.Getpid())
		}
	}
	return ""
}

func (h *handler) postReload(w http.ResponseWriter, r *http.Request) error {
	if _, err := params(r); err != nil {
		return err
	}
	body, err := readBody(w, r, true)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(body)) > 0 {
		var none struct{}
		if err := decodeObject(body, nil, &none); err != nil {
			return err
		}
	}
	h.log.Info("api: reload requested", "remote", r.RemoteAddr)
	if err := h.b.Reload(r.Context()); err != nil {
		h.log.Warn("api: reload failed", "err", err)
		return fmt.Errorf("reload: %w", err)
	}
	h.writeJSON(w, http.StatusOK, ReloadResponse{Schema: Schema, OK: true})
	return nil
}
