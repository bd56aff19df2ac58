// Package rest is pgtask's HTTP API: enqueue tasks, read their status, list, cancel and
// revive them, list topics with their stats, and pause or resume topics. `pgtask serve`
// mounts it; docs/rest.md shows every endpoint with curl, and GET /openapi.json serves
// the OpenAPI 3 description.
//
// A tour of the package:
//
//   - rest.go: [Config], [New], the route table and error mapping (400 invalid input or
//     an unreadable body, 401 missing or wrong bearer token, 404 unknown topic or task,
//     409 wrong state, 413 body too large, 429 queue cap reached, 500 otherwise, whose
//     text never says how to reach the database). Authentication is Config.Guard's (package
//     httpguard), which the server also wraps around the whole handler; every route with
//     a {topic} checks it with repository.ValidateTopic first.
//   - decode.go: pure functions that turn request bodies and query strings into
//     repository arguments, rejecting unknown fields, text that is not UTF-8 and values
//     beyond the repository's limits (each decoder has a fuzz test).
//   - json.go: the error body; package wire has the shapes of tasks and topics.
//   - openapi.json: the hand-written OpenAPI document, checked against the route table.
//
// Every request runs on the configured pool with its own statements; nothing is held
// between requests. A listing reads excerpts (repository.Excerpts) and writes them one
// task at a time, so its cost does not grow with the tasks' inputs.
package rest
