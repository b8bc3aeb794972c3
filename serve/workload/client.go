package workload

// See doc.go for an overview. This file is the client of the kubelet's
// pod-resources API: one unary gRPC call (PodResourcesLister.List) made
// with the standard library, and the decoding of its answer.
//
// gRPC over HTTP/2 is, for a unary call: a POST to /<service>/<method>
// with content-type application/grpc and "te: trailers"; a body that is
// one length-prefixed message (a compression flag byte, a 4-byte big-endian
// length, the protobuf bytes); an answer that is one length-prefixed
// message followed by trailers grpc-status (0 is OK) and grpc-message
// (percent-encoded). An error may come as headers alone ("trailers-only").
// The kubelet serves it without TLS on a Unix socket, so the connection is
// HTTP/2 with prior knowledge (net/http's unencrypted HTTP/2).
//
// The generated client (google.golang.org/grpc with k8s.io/kubelet's
// types) would do the same for 6.3 MB of binary (docs/dependencies.md);
// the tests use exactly that stack as the server, so this client is checked
// against the implementation the kubelet runs.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// listPath is the v1 List method: package v1, service PodResourcesLister
// (k8s.io/kubelet/pkg/apis/podresources/v1/api.proto).
const listPath = "/v1.PodResourcesLister/List"

// emptyRequest is a ListPodResourcesRequest (no fields) framed: not
// compressed, length 0.
var emptyRequest = []byte{0, 0, 0, 0, 0}

// gRPC status codes this package names (google.golang.org/grpc/codes).
const (
	codeOK               = 0
	codeUnknown          = 2
	codeDeadlineExceeded = 4
	codePermissionDenied = 7
	codeInternal         = 13
	codeUnimplemented    = 12
	codeUnavailable      = 14
	codeUnauthenticated  = 16
)

var codeNames = [...]string{"OK", "Canceled", "Unknown", "InvalidArgument", "DeadlineExceeded", "NotFound",
	"AlreadyExists", "PermissionDenied", "ResourceExhausted", "FailedPrecondition", "Aborted", "OutOfRange",
	"Unimplemented", "Internal", "Unavailable", "DataLoss", "Unauthenticated"}

// rpcError is a call that the server answered with a non-OK status.
type rpcError struct {
	Code    int
	Message string
}

func (e *rpcError) Error() string {
	name := "Code(" + strconv.Itoa(e.Code) + ")"
	if e.Code >= 0 && e.Code < len(codeNames) {
		name = codeNames[e.Code]
	}
	return fmt.Sprintf("rpc error: code = %s desc = %s", name, e.Message)
}

// Is makes a DeadlineExceeded status match context.DeadlineExceeded: the
// server gave up on the deadline this client sent (grpc-timeout), which is
// the caller's own deadline.
func (e *rpcError) Is(target error) bool {
	return target == context.DeadlineExceeded && e.Code == codeDeadlineExceeded
}

// rpcCode is err's gRPC status code, or -1 when err is not one.
func rpcCode(err error) int {
	if e, ok := errors.AsType[*rpcError](err); ok {
		return e.Code
	}
	return -1
}

// client calls List over one HTTP/2 connection, redialled when it breaks.
type client struct {
	tr *http.Transport
}

func newClient(socket string, dial func(ctx context.Context, socket string) (net.Conn, error)) *client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &client{tr: &http.Transport{
		Protocols: &p,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dial(ctx, socket)
		},
		MaxResponseHeaderBytes: 64 << 10,
		IdleConnTimeout:        5 * time.Minute,
	}}
}

func dialUnix(ctx context.Context, socket string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", socket)
}

// close drops the connection; the next call dials afresh.
func (c *client) close() { c.tr.CloseIdleConnections() }

// list calls List and decodes the answer.
func (c *client) list(ctx context.Context) ([]pod, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://localhost"+listPath, bytes.NewReader(emptyRequest))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	req.Header.Set("User-Agent", "vram")
	if d, ok := ctx.Deadline(); ok {
		// The server gives up soon after the caller does. A second later
		// than our own deadline, so that ours decides and a slow answer
		// reads as our timeout, not as a stream the server cancelled. The
		// value is at most 8 digits; in milliseconds that is 27 hours.
		ms := max(time.Until(d).Milliseconds(), 1) + 1000
		req.Header.Set("Grpc-Timeout", strconv.FormatInt(min(ms, 99_999_999), 10)+"m")
	}
	resp, err := c.tr.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if st := resp.Header.Get("Grpc-Status"); st != "" {
		// Trailers-only: the status came with the headers, no message.
		if err := statusError(st, resp.Header.Get("Grpc-Message")); err != nil {
			return nil, err
		}
		return nil, errors.New("answer without a message")
	}
	if resp.StatusCode != http.StatusOK {
		return nil, &rpcError{Code: httpCode(resp.StatusCode), Message: "HTTP status " + resp.Status}
	}
	if ct := resp.Header.Get("Content-Type"); !isGRPC(ct) {
		return nil, fmt.Errorf("answer is %q, not application/grpc", ct)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxResponse+5+1))
	if err != nil {
		return nil, err
	}
	if err := statusError(resp.Trailer.Get("Grpc-Status"), resp.Trailer.Get("Grpc-Message")); err != nil {
		return nil, err
	}
	msg, err := unframe(body)
	if err != nil {
		return nil, err
	}
	return decodeList(msg)
}

func isGRPC(ct string) bool {
	const p = "application/grpc"
	return len(ct) >= len(p) && ct[:len(p)] == p && (len(ct) == len(p) || ct[len(p)] == '+' || ct[len(p)] == ';')
}

// statusError reads the grpc-status and grpc-message trailers: nil for
// OK, an *rpcError otherwise. A missing status is an error: the server did
// not finish the call.
func statusError(st, msg string) error {
	if st == "" {
		return &rpcError{Code: codeInternal, Message: "answer ended without a grpc-status"}
	}
	code, err := strconv.Atoi(st)
	if err != nil || code < 0 {
		return &rpcError{Code: codeUnknown, Message: fmt.Sprintf("malformed grpc-status %q", st)}
	}
	if code == codeOK {
		return nil
	}
	if m, err := url.PathUnescape(msg); err == nil {
		msg = m
	}
	return &rpcError{Code: code, Message: msg}
}

// httpCode maps an HTTP status without a gRPC status to a gRPC code, as
// gRPC's HTTP/2 protocol description does.
func httpCode(status int) int {
	switch status {
	case http.StatusBadRequest:
		return codeInternal
	case http.StatusUnauthorized:
		return codeUnauthenticated
	case http.StatusForbidden:
		return codePermissionDenied
	case http.StatusNotFound:
		return codeUnimplemented
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return codeUnavailable
	}
	return codeUnknown
}

// unframe returns the one message of a unary answer.
func unframe(b []byte) ([]byte, error) {
	if len(b) < 5 {
		return nil, fmt.Errorf("answer of %d bytes is shorter than a message header", len(b))
	}
	if b[0] != 0 {
		return nil, fmt.Errorf("answer is compressed (flag %d), which was not asked for", b[0])
	}
	n := binary.BigEndian.Uint32(b[1:5])
	if n > maxResponse {
		return nil, fmt.Errorf("answer of %d bytes is over the %d-byte limit", n, maxResponse)
	}
	if uint64(len(b)-5) != uint64(n) {
		return nil, fmt.Errorf("answer holds %d bytes after its header, which announces %d", len(b)-5, n)
	}
	return b[5:], nil
}

// The part of a listing this package reads, decoded from the protobuf wire
// format. Field numbers are those of api.proto (v1):
//
//	ListPodResourcesResponse { repeated PodResources pod_resources = 1; }
//	PodResources       { string name = 1; string namespace = 2; repeated ContainerResources containers = 3; ... }
//	ContainerResources { string name = 1; repeated ContainerDevices devices = 2; ... }
//	ContainerDevices   { string resource_name = 1; repeated string device_ids = 2; ... }
//
// Other fields (CPU IDs, memory, topology, dynamic resources) are skipped.
type (
	pod struct {
		Name, Namespace string
		Containers      []container
	}
	container struct {
		Name    string
		Devices []devices
	}
	devices struct {
		Resource string
		IDs      []string
	}
)

func decodeList(b []byte) ([]pod, error) {
	var pods []pod
	err := eachBytes(b, func(num protowire.Number, v []byte) error {
		if num != 1 {
			return nil
		}
		p, err := decodePod(v)
		if err != nil {
			return fmt.Errorf("pod %d: %w", len(pods), err)
		}
		pods = append(pods, p)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("decoding the listing: %w", err)
	}
	return pods, nil
}

func decodePod(b []byte) (pod, error) {
	var p pod
	err := eachBytes(b, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			p.Name = string(v)
		case 2:
			p.Namespace = string(v)
		case 3:
			c, err := decodeContainer(v)
			if err != nil {
				return fmt.Errorf("container %d: %w", len(p.Containers), err)
			}
			p.Containers = append(p.Containers, c)
		}
		return nil
	})
	return p, err
}

func decodeContainer(b []byte) (container, error) {
	var c container
	err := eachBytes(b, func(num protowire.Number, v []byte) error {
		switch num {
		case 1:
			c.Name = string(v)
		case 2:
			var d devices
			err := eachBytes(v, func(num protowire.Number, v []byte) error {
				switch num {
				case 1:
					d.Resource = string(v)
				case 2:
					d.IDs = append(d.IDs, string(v))
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("devices: %w", err)
			}
			c.Devices = append(c.Devices, d)
		}
		return nil
	})
	return c, err
}

// eachBytes calls f for every length-delimited field of message b, in
// order, and skips fields of other wire types (protobuf parsers treat a
// field whose wire type does not match its declaration as unknown).
func eachBytes(b []byte, f func(protowire.Number, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ != protowire.BytesType {
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := f(num, v); err != nil {
			return err
		}
	}
	return nil
}
