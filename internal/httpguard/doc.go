// Package httpguard is the protection every HTTP server pgtask runs shares: the REST API
// of `pgtask serve` and `pgtask dev`, the /metrics and /healthz server of cmd/processor,
// and any route added to them later. SECURITY.md describes what it protects against.
//
// A tour of the package:
//
//   - server.go: [Timeouts] and [NewServer], an http.Server whose every phase of a
//     connection is bounded (headers, the whole request with its body, the response, the
//     idle time between requests). A route that must hold a request longer (a long poll,
//     a stream, a large upload) calls [Extend] for itself.
//   - guard.go: [Guard], built from the configured bearer token ([CheckToken] refuses one
//     that cannot work, such as one ending in a newline) and the listening address.
//     [Guard.Protect] wraps a server's whole handler: without a token it answers only
//     requests whose Host names the bound address (or an allowed host), which defeats DNS
//     rebinding, and only writes of Content-Type application/json, which a cross-site page
//     cannot send without a CORS preflight that is never granted; with or without a
//     token it refuses browsers' cross-origin writes (Sec-Fetch-Site, Origin).
//     [Guard.Authenticate] requires the bearer token on the routes it wraps, compared in
//     constant time.
//   - body.go: [ReadBody] reads a request body within a limit and tells the client's
//     failures (a body cut short, a malformed chunk, one too slow) from the server's.
//   - errors.go: [ErrorText], what a client is told of an error under its status, and
//     [InternalText], what a 500 tells of a server-side failure, without what a failure
//     to connect says of the database's address and users; [BodyStatus] answers
//     ReadBody's errors.
//
// A new route gets all of it by being mounted on the handler that Guard.Protect wraps and
// NewServer serves (in `pgtask serve`, the root mux of cmd/pgtask/serve.go), behind
// Guard.Authenticate unless it is meant to be public, and by reading its body with
// ReadBody.
package httpguard
