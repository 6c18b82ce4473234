// Package mcpwire is the wire of fleetmgr's hot path: what goes over the
// connection when fleetmgr forwards a tools/call to a fleet's MCP server
// (MCP "Streamable HTTP" transport) without the go-sdk's transport, and how
// the answer goes back to the caller.
//
// Reading an upstream's answer:
//
//   - ResponseReader frames HTTP/1.1 responses on a kept-alive connection
//     (net/http's http.ReadResponse: Content-Length, chunked, or to the end
//     of the connection), skipping interim 1xx responses and bounding heads
//     as net/http's Transport does; CheckStatus sorts the status as the
//     go-sdk client does (2xx, 404 for an unknown session, anything else).
//   - Reader yields the JSON-RPC messages of a body: one for
//     application/json, one per message event for text/event-stream, each
//     read into one buffer of its own (no copy of a whole message is made
//     on the way, whatever its size) and decoded in place by Decode. A
//     message over the Reader's cap is an error (*TooLargeError) once the
//     cap is passed, never a truncated or silently dropped message.
//   - Decode accepts and decodes exactly what the go-sdk's
//     jsonrpc.DecodeMessage does, with the same decoder, without copying
//     params or results.
//
// The contract, held by the differential fuzz target FuzzReadAgainstSDK:
// for any bytes an upstream sends in answer to a POSTed call, JSON or SSE,
// chunked or not, ResponseReader + CheckStatus + Reader yield the same
// messages in the same order, up to and including the response to the
// call, as the go-sdk's own client transport (StreamableClientTransport,
// go-sdk v1.8.0, with the same cap as its MaxEventSize) reading the same
// bytes; where the SDK's transport fails or the stream ends without the
// response, Reader fails or reports the end too. Two documented
// differences: a JSON body over the cap is an error here (the SDK reads
// JSON bodies without a cap), and a stream that ends after an event id is
// not resumed (the SDK would reconnect with Last-Event-ID; a go-sdk server
// keeps no event store unless given one): Reader reports the end.
//
// Writing the answer: Frame holds one outgoing message in pieces that are
// written in order and never joined (ResponseFrame splices the caller's id
// in front of an upstream's result), as a server-sent event
// (EventStream.Message), a line (WriteLine, MCP's stdio framing) or a body
// (Frame.WriteTo). EventStream is fleetmgr's one writer of server-sent
// events (the dashboard's streams use it too), AppendEvent its one
// encoder.
//
// Talking to an upstream: Pool is fleetmgr's one HTTP/1.1 client per
// fleetd, carrying both the hot path's calls (Post) and, as the
// http.RoundTripper of the go-sdk's client transport, the SDK session's
// own requests.
//
// Memory: a message's buffer starts as a pooled 64 KiB Go buffer; a larger
// message moves to an anonymous memory mapping grown with mremap(2) and
// unmapped by Message.Release, so a message costs about its own size
// while in flight and nothing once released.
package mcpwire
