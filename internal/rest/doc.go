// Package rest is pgtask's HTTP API: enqueue tasks, read their status, list, cancel and
// revive them, list topics with their stats, and pause or resume topics. `pgtask serve`
// mounts it; docs/rest.md shows every endpoint with curl, and GET /openapi.json serves
// the OpenAPI 3 description.
//
// A tour of the package:
//
//   - rest.go: [Config], [New], the route table, authentication and error mapping
//     (400 invalid input, 401 missing or wrong bearer token, 404 unknown topic or task,
//     409 wrong state, 413 body too large, 429 queue cap reached, 500 otherwise).
//   - decode.go: pure functions that turn request bodies and query strings into
//     repository arguments, rejecting unknown fields (fuzzed by FuzzDecodeEnqueue).
//   - json.go: the JSON shapes of tasks and topics (states by name, durations in ms).
//   - openapi.json: the hand-written OpenAPI document, checked against the route table.
//
// Every request runs on the configured pool with its own statements; nothing is held
// between requests.
package rest
