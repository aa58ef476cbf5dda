// Package wasihttp is outbound HTTP for Go guests: an [http.RoundTripper] over the contract's
// `wasi:http/outgoing-handler`, so that the standard [http.Client] works:
//
//	client := &http.Client{Transport: wasihttp.Transport{}}
//	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
//
// Only for guests of the `http-controller` world (a `wit-world` file beside go.mod saying so):
// importing this package makes the component import wasi:http. The host sends a request only
// within the `http:` rules of the guest's grant (URL prefix and methods), adds the rules'
// credentials itself (a guest never sees them), and connects only to addresses it checked.
//
// Errors, as a [reconciler.HostError] (http.Client wraps it in a *url.Error; returned from a
// reconcile, the SDK finds it in the chain and retries by its kind):
//   - `denied`: the host refused the request (a URL or method outside the grant, an internal
//     address); the text says which rule would allow it. Permanent: only a new grant helps.
//   - `unavailable`: DNS, connection, TLS, a timeout, a broken response, the guest's HTTP
//     rate; transient.
//   - `invalid`: a request the host cannot send as it is (a bad URL or method, a forbidden
//     header, a body over the host's cap); permanent.
//   - `other`: anything else (a response over the host's caps among them); transient.
//
// A status of 4xx or 5xx is a response, not an error: the guest decides.
//
// Costs: RoundTrip reads the request body whole before sending it; the host reads the response
// whole (at most 4 MiB) before handing it over, and Body reads from memory. The call blocks
// until then. A deadline of the request's context becomes its connect and first-byte timeouts;
// a context cancelled while the call blocks is not noticed (the reconcile's deadline, which the
// host enforces, bounds every request).
//
// Size: an http.Client brings net/http's own transport along (TLS, HTTP/2, unused here, but
// the linker cannot know): the courier (guests/go/courier) is 11 MB against the greeter's
// 3.4 MB. [Do] sends without a client (no redirects, no cookie jar) and costs about 2.5 MB.
package wasihttp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"wit_component/reconciler"
)

// Transport sends requests through the host. Its zero value is ready to use.
type Transport struct{}

// Client is an [http.Client] on [Transport], following redirects as http.Client does (each
// new request checked against the grant like any other).
var Client = &http.Client{Transport: Transport{}}

// Do sends one request as [Transport] does, without an [http.Client]: no redirects, no cookie
// jar, and about 5 MB less component (see the package documentation). The caller closes the
// body.
func Do(req *http.Request) (*http.Response, error) {
	return Transport{}.RoundTrip(req)
}

// outgoing is a request as the host takes it.
type outgoing struct {
	method        string
	scheme        string // http or https
	authority     string
	pathWithQuery string
	header        [][2]string
	body          []byte
	// The connect and first-byte timeouts; 0: none of the guest's own.
	timeout time.Duration
}

// incoming is a whole response.
type incoming struct {
	status int
	header [][2]string
	body   []byte
}

// imports is the one host function: the generated bindings in a component
// (wasihttp_wasip1.go), a fake in tests. Its errors come from [fromErrorCode] and
// [fromHeaderError].
type imports interface {
	send(request outgoing) (incoming, error)
}

// hostCalls is set by wasihttp_wasip1.go's init in a component, and by tests.
var hostCalls imports

// RoundTrip sends req through the host and returns its whole response. See the package
// documentation for errors and costs.
func (Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	request, err := prepare(req)
	if err != nil {
		return nil, err
	}
	if hostCalls == nil {
		return nil, fmt.Errorf("wasihttp: no host to send %s %s: requests go out only inside the component (GOOS=wasip1)", request.method, req.URL)
	}
	response, err := hostCalls.send(request)
	if err != nil {
		return nil, err
	}
	header := make(http.Header, len(response.header))
	for _, field := range response.header {
		header.Add(field[0], field[1])
	}
	return &http.Response{
		Status:        strconv.Itoa(response.status) + " " + http.StatusText(response.status),
		StatusCode:    response.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        header,
		Body:          io.NopCloser(bytes.NewReader(response.body)),
		ContentLength: int64(len(response.body)),
		Request:       req,
	}, nil
}

// prepare is req as the host takes it, its body read and closed.
func prepare(req *http.Request) (outgoing, error) {
	var body []byte
	if req.Body != nil {
		read, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return outgoing{}, fmt.Errorf("wasihttp: reading the request body: %w", err)
		}
		body = read
	}
	method := req.Method
	if method == "" {
		method = http.MethodGet
	}
	scheme := strings.ToLower(req.URL.Scheme)
	if scheme != "http" && scheme != "https" {
		return outgoing{}, &reconciler.HostError{Kind: reconciler.Invalid,
			Message: fmt.Sprintf("%s %s: only http and https URLs can be sent", method, req.URL)}
	}
	request := outgoing{
		method:        method,
		scheme:        scheme,
		authority:     req.URL.Host,
		pathWithQuery: req.URL.RequestURI(),
		body:          body,
	}
	for name, values := range req.Header {
		for _, value := range values {
			request.header = append(request.header, [2]string{name, value})
		}
	}
	if len(body) > 0 || method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch {
		request.header = append(request.header, [2]string{"Content-Length", strconv.Itoa(len(body))})
	}
	if deadline, ok := req.Context().Deadline(); ok {
		request.timeout = time.Until(deadline)
		if request.timeout <= 0 {
			return outgoing{}, context.DeadlineExceeded
		}
	}
	return request, req.Context().Err()
}

// errorCodes names the cases of wasi:http's `error-code`, in the WIT's order (the bindings
// give the index).
var errorCodes = [...]string{
	"DNS-timeout", "DNS-error", "destination-not-found", "destination-unavailable",
	"destination-IP-prohibited", "destination-IP-unroutable", "connection-refused",
	"connection-terminated", "connection-timeout", "connection-read-timeout",
	"connection-write-timeout", "connection-limit-reached", "TLS-protocol-error",
	"TLS-certificate-error", "TLS-alert-received", "HTTP-request-denied",
	"HTTP-request-length-required", "HTTP-request-body-size", "HTTP-request-method-invalid",
	"HTTP-request-URI-invalid", "HTTP-request-URI-too-long", "HTTP-request-header-section-size",
	"HTTP-request-header-size", "HTTP-request-trailer-section-size", "HTTP-request-trailer-size",
	"HTTP-response-incomplete", "HTTP-response-header-section-size", "HTTP-response-header-size",
	"HTTP-response-body-size", "HTTP-response-trailer-section-size", "HTTP-response-trailer-size",
	"HTTP-response-transfer-coding", "HTTP-response-content-coding", "HTTP-response-timeout",
	"HTTP-upgrade-failed", "HTTP-protocol-error", "loop-detected", "configuration-error",
	"internal-error",
}

// Indexes in errorCodes that decide a kind (the same table as the Python SDK's http.py).
const (
	ipProhibited       = 4
	requestDenied      = 15
	firstRequestError  = 16 // HTTP-request-length-required ...
	uriInvalid         = 19
	lastRequestError   = 24 // ... HTTP-request-trailer-size
	responseIncomplete = 25
	responseTimeout    = 33
	protocolError      = 35
	internalError      = 38
)

// fromErrorCode is the [reconciler.HostError] of a wasi:http error-code: its case (the index
// in the WIT) and its text, if it has one. The host's own refusals and failures arrive as
// `internal-error` with a text that starts with the kind (`denied: guest x may not POST ...`).
func fromErrorCode(code uint8, text string) error {
	name := fmt.Sprintf("error-code %d", code)
	if int(code) < len(errorCodes) {
		name = errorCodes[code]
	}
	if code == internalError {
		if kind, rest, ok := strings.Cut(text, ": "); ok && isKind(kind) {
			return &reconciler.HostError{Kind: reconciler.ErrorKind(kind), Message: rest}
		}
		if text == "" {
			text = name
		}
		return &reconciler.HostError{Kind: reconciler.Other, Message: text}
	}
	if text != "" {
		name += " (" + text + ")"
	}
	kind := reconciler.Other
	switch {
	case code == ipProhibited || code == requestDenied:
		kind = reconciler.Denied
	case code < ipProhibited || (code > ipProhibited && code < requestDenied),
		code == responseIncomplete, code == responseTimeout, code == protocolError:
		kind = reconciler.Unavailable
	case code >= firstRequestError && code <= lastRequestError:
		kind = reconciler.Invalid
	}
	return &reconciler.HostError{Kind: kind, Message: name}
}

func isKind(kind string) bool {
	switch reconciler.ErrorKind(kind) {
	case reconciler.Denied, reconciler.NotFound, reconciler.Conflict, reconciler.Invalid,
		reconciler.Unavailable, reconciler.Other:
		return true
	}
	return false
}

// headerErrors names the cases of wasi:http's `header-error`, in the WIT's order.
var headerErrors = [...]string{"invalid-syntax", "forbidden", "immutable"}

// fromHeaderError is the error of request headers the host refused: a malformed one, or one
// that only the host sets (Host, Connection, Transfer-Encoding, ... and the headers of the
// grant's credentials).
func fromHeaderError(code uint8) error {
	name := fmt.Sprintf("header-error %d", code)
	if int(code) < len(headerErrors) {
		name = headerErrors[code]
	}
	return &reconciler.HostError{Kind: reconciler.Invalid,
		Message: "the request's headers were refused (" + name + "): one is malformed, or one the host sets itself (Host, Connection, Transfer-Encoding, a credential of the grant)"}
}
