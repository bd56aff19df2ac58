// pgtask dashboard: live refresh, charts and actions.
// Pages work without this script (they are server-rendered); it adds:
//  - live refresh (htmx, vendor/htmx.min.js): every data-refresh ms, unless the tab is
//    hidden, the page is fetched again and each element with data-live and an id is
//    swapped for its new version (hx-select-oob; nothing else moves, so forms being
//    filled are left alone); once the session has ended it says so and stops;
//  - charts (uPlot, vendor/uPlot.iife.min.js): each data-chart element plots the
//    data-series (JSON: tasks pushed and completed by result in each second of the last
//    minutes) of the live element its data-chart names, updated at each refresh;
//  - actions: buttons with data-post POST data-body (JSON) to their URL; forms with
//    data-action send their fields as JSON. Every write is application/json and
//    same-origin, which is what the server's guard requires.
"use strict";
(function () {
  const refreshMs = Number(document.body.dataset.refresh) || 3000;
  // The charts' series: key in data-series, label, colour.
  const series = [
    ["pushed", "Pushed", "#2f6fde"], ["succeeded", "Succeeded", "#1a7f37"], ["failed", "Failed", "#cf222e"],
    ["retried", "Retried", "#e16f24"], ["filtered", "Filtered", "#8c959f"], ["suspended", "Suspended", "#bf8700"],
  ];
  let refreshes = 0;

  // toast shows text for a few seconds, or until the page is left when sticky (and
  // then nothing replaces it).
  function toast(text, isError, sticky) {
    const el = document.getElementById("toast");
    if (!el || el.dataset.sticky === "1") return;
    if (sticky) el.dataset.sticky = "1";
    el.textContent = text;
    el.className = "show" + (isError ? " error" : "");
    clearTimeout(toast.timer);
    if (!sticky) toast.timer = setTimeout(() => { el.className = ""; }, isError ? 8000 : 3000);
  }

  // charts: the uPlot of each data-chart element, by the id of its data element.
  const charts = new Map();
  const color = (name) => getComputedStyle(document.body).getPropertyValue(name).trim();

  // draw plots (or updates) each chart from its data element, and writes the totals of
  // the window under it.
  function draw() {
    if (typeof uPlot === "undefined") return;
    document.querySelectorAll("[data-chart]").forEach((box) => {
      const source = document.getElementById(box.dataset.chart);
      let data;
      try { data = JSON.parse(source.dataset.series); } catch (e) { return; }
      const n = (data.pushed || []).length;
      const xs = Array.from({ length: n }, (_, i) => data.start + i);
      const values = [xs, ...series.map(([key]) => data[key] || [])];
      let entry = charts.get(box);
      if (!entry) {
        const text = color("--muted"), grid = color("--line");
        const axis = { stroke: text, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
        const plot = document.createElement("div");
        const totals = document.createElement("div");
        totals.className = "totals";
        box.replaceChildren(plot, totals);
        const u = new uPlot({
          width: box.clientWidth || 600, height: 160,
          scales: { x: { time: true }, y: { range: (_, min, max) => [0, Math.max(1, max)] } },
          // UTC, as every time the dashboard shows
          tzDate: (ts) => uPlot.tzDate(new Date(ts * 1000), "Etc/UTC"),
          axes: [Object.assign({ space: 80 }, axis), Object.assign({ size: 56, label: "tasks/s", labelSize: 18 }, axis)],
          series: [{ label: "Time" }, ...series.map(([, label, stroke]) => ({ label, stroke, width: 2, points: { show: false } }))],
          cursor: { drag: { x: false, y: false } },
        }, values, plot);
        entry = { u, totals };
        charts.set(box, entry);
        new ResizeObserver(() => u.setSize({ width: box.clientWidth || 600, height: 160 })).observe(box);
      } else {
        entry.u.setData(values);
      }
      entry.totals.replaceChildren(...series.map(([key, label, stroke]) => {
        const total = (data[key] || []).reduce((a, v) => a + v, 0);
        const item = document.createElement("span");
        const swatch = document.createElement("i");
        swatch.style.background = stroke;
        item.append(swatch, `${label} ${total.toLocaleString()}`);
        item.dataset.series = key;
        item.dataset.total = String(total);
        return item;
      }), Object.assign(document.createElement("span"), { textContent: `totals of the last ${Math.round(n / 60)} min` }));
      box.dataset.points = String(n);
    });
  }

  // refresh fetches the page again and swaps its live elements (htmx, one request).
  const live = Array.from(document.querySelectorAll("[data-live][id]"), (el) => "#" + el.id);
  const poller = document.createElement("div");
  poller.hidden = true;
  if (live.length) poller.setAttribute("hx-select-oob", live.join(","));
  document.body.appendChild(poller);
  // A refresh once the session has ended is sent to the login page (a redirect the
  // browser follows): the page stopped changing without a word. It says so, and stops.
  let signedOut = false;
  poller.addEventListener("htmx:afterRequest", (ev) => {
    const xhr = ev.detail && ev.detail.xhr;
    if (!xhr || !xhr.responseURL || new URL(xhr.responseURL).pathname !== "/ui/login") return;
    signedOut = true;
    document.body.dataset.signedOut = "1";
    toast("Signed out: the session has ended. Reload the page to sign in again.", true, true);
  });
  async function refresh() {
    if (signedOut || !live.length || document.hidden || typeof htmx === "undefined") return;
    try {
      await htmx.ajax("GET", location.pathname + location.search, { source: poller, target: poller, swap: "none" });
      refreshes++;
      document.body.dataset.refreshes = String(refreshes);
      draw();
    } catch (e) { /* the next refresh tries again */ }
  }

  // refreshed shows an action's outcome: the live parts fetched again, or, on a page
  // without any (a task shown whole), the page reloaded.
  async function refreshed() {
    if (!live.length) {
      // the toast shown again once reloaded
      const el = document.getElementById("toast");
      if (el) sessionStorage.setItem("pgtask-toast", el.textContent);
      location.reload();
      return;
    }
    await refresh();
  }

  async function post(url, body) {
    const res = await fetch(url, {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "Accept": "application/json" },
      body: JSON.stringify(body),
    });
    let data = null;
    try { data = await res.json(); } catch (e) { /* no JSON */ }
    if (!res.ok) throw new Error((data && data.error) || `${res.status} ${res.statusText}`);
    return data;
  }

  function fields(form) {
    const out = {};
    new FormData(form).forEach((value, key) => {
      const input = form.elements[key];
      if (input && input.dataset && input.dataset.type === "int") {
        if (value !== "") out[key] = Number(value);
      } else {
        out[key] = String(value);
      }
    });
    return out;
  }

  const apiPath = (topic) => "/ui/api/topics/" + encodeURIComponent(topic);

  // edited tells whether a form's fields differ from what the page was loaded with.
  function edited(form) {
    for (const el of form.elements) {
      if (el.tagName === "SELECT") {
        const initial = Math.max(0, Array.from(el.options).findIndex((o) => o.defaultSelected));
        if (el.selectedIndex !== initial) return true;
      } else if ("defaultValue" in el && el.type !== "submit" &&
                 el.value !== el.defaultValue.replace(/[\r\n]/g, "")) {
        // (a text field's value loses the line breaks its attribute may hold)
        return true;
      }
    }
    return false;
  }

  document.addEventListener("click", async (ev) => {
    const btn = ev.target.closest("button[data-post]");
    if (!btn) return;
    ev.preventDefault();
    btn.disabled = true;
    try {
      await post(btn.dataset.post, JSON.parse(btn.dataset.body || "{}"));
      toast(btn.textContent.trim() + ": done");
      await refreshed();
    } catch (e) {
      toast(e.message, true);
      btn.disabled = false;
    }
  });

  document.addEventListener("submit", async (ev) => {
    const form = ev.target.closest("form[data-action]");
    if (!form) return;
    ev.preventDefault();
    const button = form.querySelector("button[type=submit]");
    const body = fields(form);
    try {
      switch (form.dataset.action) {
        case "push": {
          const topic = body.topic;
          const task = { identifier: body.identifier, insertion: body.insertion, priority: Number(body.priority || 0) };
          if (body.input !== "") task.input = body.input;
          if (body.delay) task.delay = body.delay;
          const data = await post(apiPath(topic) + "/tasks", task);
          const t = data.tasks[0];
          location.assign("/ui/topics/" + encodeURIComponent(t.topic) + "/tasks/" + t.sequence);
          return;
        }
        case "bulk": {
          // The bulk form carries the filter the list was loaded with: one edited
          // above and not applied would be taken for it (a state chosen but not
          // filtered by purged every finished state).
          const filter = document.getElementById("filter-form");
          if (filter && edited(filter)) {
            toast("The filter above has changes not applied: press Filter first, or Clear; the bulk action applies to the filter the list shows", true);
            return;
          }
          if (button.dataset.armed !== "1") { // ask once more: it changes many tasks
            button.dataset.armed = "1";
            button.dataset.label = button.textContent;
            button.textContent = "Click again to confirm";
            setTimeout(() => { button.dataset.armed = ""; button.textContent = button.dataset.label; }, 6000);
            return;
          }
          button.dataset.armed = "";
          button.textContent = button.dataset.label;
          const data = await post(form.dataset.url, body);
          // a search of a finished state goes on where this one stopped (data.before)
          if (form.elements.before) form.elements.before.value = data.before ? String(data.before) : "";
          toast(data.message);
          await refresh();
          return;
        }
        case "settings": {
          // Only the fields changed here: the others keep what they hold now, which
          // may have been set elsewhere (the CLI, another tab) since this page loaded.
          const changed = {};
          for (const [key, value] of Object.entries(body)) {
            const input = form.elements[key];
            if (input && String(input.value) !== input.defaultValue) changed[key] = value;
          }
          if (Object.keys(changed).length === 0) {
            toast("Nothing changed");
            return;
          }
          await post(form.dataset.url, changed);
          for (const key of Object.keys(changed)) form.elements[key].defaultValue = form.elements[key].value;
          toast("Saved");
          await refresh();
          return;
        }
        default: {
          await post(form.dataset.url, body);
          toast("Saved");
          await refresh();
        }
      }
    } catch (e) {
      toast(e.message, true);
    }
  });

  // a bulk form changed (another action, result or mode) searches again from the newest
  document.addEventListener("change", (ev) => {
    const form = ev.target.closest("form[data-action=bulk]");
    if (form && form.elements.before) form.elements.before.value = "";
  });

  document.body.dataset.refreshes = "0";
  draw();
  setInterval(refresh, refreshMs);
  const kept = sessionStorage.getItem("pgtask-toast");
  if (kept) {
    sessionStorage.removeItem("pgtask-toast");
    toast(kept);
  }
  document.body.dataset.ready = "1";
})();
