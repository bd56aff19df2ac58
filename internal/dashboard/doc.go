// Package dashboard is pgtask's web dashboard, served by `pgtask serve` and `pgtask dev`
// at "/" in front of the REST API (package rest): an overview of the topics, a page per
// topic and per task, the processes, and a form to push a task. docs/dashboard.md shows
// it; New builds the handler.
//
// A tour of the package:
//
//   - dashboard.go: [Config], [New] and the routes: pages under [Prefix], the REST API
//     under Prefix+"api/" for the pages' scripts, the login form and its session cookie
//     (HttpOnly, SameSite=Strict, a random session id: the token itself is never in
//     it). session.go: the sessions, signed cookies with a 12-hour expiry that every
//     server of the token accepts; a logout revokes its own on its server.
//   - pages.go: the pages, server-rendered with html/template (which escapes every value
//     from the database), each reading through repository: the overview pages through the
//     topics by name (Repository.TopicPage, then StatsAll of the page: the stats path,
//     never a count over the tasks), the topic page lists tasks by keyset
//     (Repository.Excerpts after or before a sequence, a time range resolved to sequences
//     with Repository.Resolve), the task page reads one task, its texts cut in the
//     database to what it shows (Repository.GetExcerpt; ?full=1 reads them whole), and
//     the latest tasks of its identifier.
//   - actions.go: what the REST API does not do: edit a topic's settings and bulk
//     actions on a filter (cancel, revive, purge; a revival without a state filter
//     revives the broken tasks only, EXPIRED to SUSPENDED; a finished state is searched
//     a window of sequences per request; each request works for Config.BulkFor at
//     most, then answers "apply again"). Pushing, cancelling and reviving one task and
//     pausing or resuming a topic go to the REST API itself, so the dashboard and the
//     API share their handlers.
//   - templates/: the pages; static/: app.css (light and dark, following the system
//     setting), app.js (live refresh of the parts marked data-live, the charts, the
//     actions as JSON POSTs) and vendor/ (below).
//
// Third-party code, vendored in static/vendor/ at pinned versions, each with its
// licence beside it, embedded with go:embed (go build and go test need no Node
// toolchain):
//
//   - htmx.min.js: htmx 2.0.11 (BSD Zero Clause), dist/htmx.min.js of the npm package
//     htmx.org@2.0.11, sha256 d6fdc75f204e6bdefa99b69bf1e6d4ac69b8a364f77929f45c13476b4000f717.
//     The live refresh: one request for the page, its data-live elements swapped with
//     hx-select-oob. Configured by the htmx-config meta tag of layout.html so that it
//     needs nothing the Content-Security-Policy forbids (no eval, no inline style).
//   - uPlot.iife.min.js and uPlot.min.css: uPlot 1.6.32 (MIT), dist/ of the npm package
//     uplot@1.6.32, sha256 19c8d4c6ad88929a79f4ae49d6f7161566dfd0ba3d15cc495e974f787eb78f1f
//     and df630c6a8d6f8eeaff264b50f73ce5b114f646ffd9a0bb74f049b0a00135fa04. The charts.
//
// To update one: `npm pack htmx.org@VERSION` (or uplot@VERSION), copy the same files
// from the tarball's package/dist/ and its LICENSE over those in static/vendor/, put the
// new version and sha256 here, and run the browser tests (TestBrowser).
//
// Security: every page and action needs the session (or the bearer token) when a token
// is configured; writes are JSON POSTs, which the server's httpguard.Guard protects
// against cross-site requests; pages send a Content-Security-Policy that allows only
// the dashboard's own script and style.
package dashboard
