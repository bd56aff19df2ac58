// Package metrics exports pgtask's Prometheus metrics with the official client.
//
// Three sources feed it:
//
//   - [Metrics.Listener] observes task managers (processor.ManagerConfig.Listener): tasks
//     completed by topic and result, poll, handler and completion latencies, batch sizes,
//     errors and empty polls.
//   - [Metrics.OnExpire] observes a processor's expiry of dead owners' leases
//     (processor.Config.OnExpire).
//   - [NewQueueCollector] reads the queue itself at scrape time: tasks per topic and
//     state, delayed tasks, the age of the oldest pollable task and the live owners,
//     cached for a while so frequent scrapes cost the database little.
//
// A program wires them like this:
//
//	reg := prometheus.NewRegistry()
//	m := metrics.New(reg)
//	reg.MustRegister(metrics.NewQueueCollector(pool, repo, 10*time.Second))
//	p, _ := processor.New(processor.Config{Pool: pool, OnExpire: m.OnExpire})
//	p.Manage(processor.ManagerConfig{Topic: "mail", Handler: h, Listener: m.Listener()})
//	http.Handle("GET /metrics", metrics.Handler(reg))
package metrics
