//go:build wasip1

package wasihttp

// The request through the bindings wit-bindgen generates from wit/ (and wit/deps) into an
// `http-controller` guest's build: wasi:http's resources in the order the interface wants them
// made and dropped (a child before its parent). Go's garbage collector is off in a guest
// (guests/go/gc.go), so every resource is dropped here, not left to a cleanup.

import (
	handler "wit_component/wasi_http_outgoing_handler"
	types "wit_component/wasi_http_types"
	streams "wit_component/wasi_io_streams"

	witTypes "go.bytecodealliance.org/pkg/wit/types"
)

func init() { hostCalls = bindings{} }

type bindings struct{}

// The most `blocking-write-and-flush` takes at once, and what one read asks for.
const (
	writeChunk = 4096
	readChunk  = 64 << 10
)

func (bindings) send(o outgoing) (incoming, error) {
	entries := make([]witTypes.Tuple2[string, []uint8], len(o.header))
	for i, field := range o.header {
		entries[i] = witTypes.Tuple2[string, []uint8]{F0: field[0], F1: []byte(field[1])}
	}
	fields := types.FieldsFromList(entries)
	if fields.IsErr() {
		return incoming{}, fromHeaderError(fields.Err().Tag())
	}
	request := types.MakeOutgoingRequest(fields.Ok())
	scheme := types.MakeSchemeHttp()
	if o.scheme == "https" {
		scheme = types.MakeSchemeHttps()
	}
	if request.SetMethod(method(o.method)).IsErr() ||
		request.SetScheme(witTypes.Some(scheme)).IsErr() ||
		request.SetAuthority(witTypes.Some(o.authority)).IsErr() ||
		request.SetPathWithQuery(witTypes.Some(o.pathWithQuery)).IsErr() {
		request.Drop()
		return incoming{}, fromErrorCode(uriInvalid, "")
	}
	body := request.Body().Ok() // the first call: cannot fail
	options := witTypes.None[*types.RequestOptions]()
	if o.timeout > 0 {
		opts := types.MakeRequestOptions()
		opts.SetConnectTimeout(witTypes.Some(uint64(o.timeout)))
		opts.SetFirstByteTimeout(witTypes.Some(uint64(o.timeout)))
		options = witTypes.Some(opts)
	}
	sent := handler.Handle(request, options)
	if sent.IsErr() {
		body.Drop()
		return incoming{}, errorCode(sent.Err())
	}
	future := sent.Ok()
	// The host reads the body while it answers; a request it refused before reading stops the
	// writes, and the answer says why.
	writeBody(body, o.body)
	types.OutgoingBodyFinish(body, witTypes.None[*types.Fields]())
	ready := future.Subscribe()
	ready.Block()
	ready.Drop()
	got := future.Get()
	future.Drop()
	if got.IsNone() || got.Some().IsErr() {
		return incoming{}, fromErrorCode(internalError, "the response was taken already")
	}
	if answered := got.Some().Ok(); answered.IsErr() {
		return incoming{}, errorCode(answered.Err())
	}
	return read(got.Some().Ok().Ok())
}

func writeBody(body *types.OutgoingBody, bytes []byte) {
	stream := body.Write().Ok() // the first call: cannot fail
	defer stream.Drop()
	for len(bytes) > 0 {
		n := min(len(bytes), writeChunk)
		if stream.BlockingWriteAndFlush(bytes[:n]).IsErr() {
			return
		}
		bytes = bytes[n:]
	}
}

// read takes the response whole and drops it.
func read(response *types.IncomingResponse) (incoming, error) {
	defer response.Drop()
	answer := incoming{status: int(response.Status())}
	headers := response.Headers()
	for _, entry := range headers.Entries() {
		answer.header = append(answer.header, [2]string{entry.F0, string(entry.F1)})
	}
	headers.Drop()
	body := response.Consume().Ok() // the first call: cannot fail
	stream := body.Stream().Ok()    // likewise
	var err error
	for {
		chunk := stream.BlockingRead(readChunk)
		if chunk.IsErr() {
			if failed := chunk.Err(); failed.Tag() != streams.StreamErrorClosed {
				ioError := failed.LastOperationFailed()
				err = fromErrorCode(responseIncomplete, "")
				if code := types.HttpErrorCode(ioError); code.IsSome() {
					err = errorCode(code.Some())
				}
				ioError.Drop()
			}
			break
		}
		answer.body = append(answer.body, chunk.Ok()...)
	}
	stream.Drop()
	types.IncomingBodyFinish(body).Drop()
	return answer, err
}

func method(name string) types.Method {
	switch name {
	case "GET":
		return types.MakeMethodGet()
	case "HEAD":
		return types.MakeMethodHead()
	case "POST":
		return types.MakeMethodPost()
	case "PUT":
		return types.MakeMethodPut()
	case "DELETE":
		return types.MakeMethodDelete()
	case "CONNECT":
		return types.MakeMethodConnect()
	case "OPTIONS":
		return types.MakeMethodOptions()
	case "TRACE":
		return types.MakeMethodTrace()
	case "PATCH":
		return types.MakeMethodPatch()
	}
	return types.MakeMethodOther(name)
}

// errorCode is fromErrorCode of the bindings' error-code, with the text of the cases that
// carry one worth showing.
func errorCode(code types.ErrorCode) error {
	text := ""
	switch code.Tag() {
	case types.ErrorCodeInternalError:
		text = code.InternalError().SomeOr("")
	case types.ErrorCodeDnsError:
		text = code.DnsError().Rcode.SomeOr("")
	case types.ErrorCodeTlsAlertReceived:
		text = code.TlsAlertReceived().AlertMessage.SomeOr("")
	}
	return fromErrorCode(code.Tag(), text)
}
