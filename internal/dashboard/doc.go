// Package dashboard is pgtask's web dashboard, served by `pgtask serve` and `pgtask dev`
// at "/" in front of the REST API (package rest): an overview of the topics, a page per
// topic and per task, the processes, and a form to push a task. docs/dashboard.md shows
// it; New builds the handler.
//
// A tour of the package:
//
//   - dashboard.go: [Config], [New] and the routes: pages under [Prefix], the REST API
//     under Prefix+"api/" for the pages' scripts, the login form and its session cookie
//     (HttpOnly, SameSite=Strict, an HMAC of the token: the token itself is never in it).
//   - pages.go: the pages, server-rendered with html/template (which escapes every value
//     from the database), each reading through repository: the overview pages through the
//     topics by name (Repository.TopicPage, then StatsAll of the page: the stats path,
//     never a count over the tasks), the topic page lists tasks by keyset
//     (Repository.Excerpts after or before a sequence, a time range resolved to sequences
//     with Repository.Resolve), the task page reads one task whole and the latest tasks
//     of its identifier.
//   - actions.go: what the REST API does not do: edit a topic's settings and bulk
//     actions on a filter (cancel, revive, purge). Pushing, cancelling and reviving one
//     task and pausing or resuming a topic go to the REST API itself, so the dashboard
//     and the API share their handlers.
//   - templates/: the pages; static/: app.css (light and dark, following the system
//     setting) and app.js (live refresh of the parts marked data-live, the chart,
//     the actions as JSON POSTs).
//
// Third-party code: none. app.js is this package's own, about 200 lines, in place of
// htmx (partial refresh: fetch the page, swap the marked elements) and uPlot (the chart
// is one SVG polyline per state), so that there is no vendored file to keep updated and
// `go build` and `go test` need no Node toolchain. Should a library be vendored later,
// put its pinned release file under static/ and name its origin and version here.
//
// Security: every page and action needs the session (or the bearer token) when a token
// is configured; writes are JSON POSTs, which the server's httpguard.Guard protects
// against cross-site requests; pages send a Content-Security-Policy that allows only
// the dashboard's own script and style.
package dashboard
