// pgtask dashboard: partial refresh, charts and actions, without dependencies.
// Pages work without this script (they are server-rendered); it adds:
//  - live refresh: every data-refresh ms the page is fetched again and each element
//    with data-live and an id is replaced by its new version (nothing else moves, so
//    forms being filled are left alone);
//  - charts: each data-chart element draws the samples (data-sample, JSON counts) the
//    live elements carry, one point per refresh, over the last minutes;
//  - actions: buttons with data-post POST data-body (JSON) to their URL; forms with
//    data-action send their fields as JSON. Every write is application/json and
//    same-origin, which is what the server's guard requires.
"use strict";
(function () {
  const refreshMs = Number(document.body.dataset.refresh) || 3000;
  const maxPoints = Math.ceil(5 * 60 * 1000 / refreshMs); // five minutes
  const series = [
    ["due", "Ready (due)", "#2f6fde"], ["delayed", "Delayed", "#8c959f"], ["active", "Active", "#8250df"],
    ["failed", "Failed", "#cf222e"], ["expired", "Expired", "#e16f24"], ["suspended", "Suspended", "#bf8700"],
  ];
  // The samples of this page survive navigation within the tab (sessionStorage).
  const storeKey = "pgtask-chart:" + location.pathname + location.search;
  let points = [];
  try { points = JSON.parse(sessionStorage.getItem(storeKey) || "[]"); } catch (e) { points = []; }
  let refreshes = 0;

  function toast(text, isError) {
    const el = document.getElementById("toast");
    if (!el) return;
    el.textContent = text;
    el.className = "show" + (isError ? " error" : "");
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => { el.className = ""; }, isError ? 8000 : 3000);
  }

  function sample() {
    const el = document.querySelector("[data-sample]");
    if (!el) return;
    try {
      points.push({ t: Date.now(), v: JSON.parse(el.dataset.sample) });
    } catch (e) { return; }
    const since = Date.now() - maxPoints * refreshMs;
    points = points.filter((p) => p.t >= since).slice(-maxPoints);
    try { sessionStorage.setItem(storeKey, JSON.stringify(points)); } catch (e) { /* full: keep in memory */ }
    draw();
  }

  const svgNS = "http://www.w3.org/2000/svg";
  function draw() {
    document.querySelectorAll("[data-chart]").forEach((box) => {
      const w = box.clientWidth || 600, h = 130;
      let top = 1;
      points.forEach((p) => series.forEach(([k]) => { top = Math.max(top, p.v[k] || 0); }));
      const svg = document.createElementNS(svgNS, "svg");
      svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
      svg.setAttribute("preserveAspectRatio", "none");
      svg.setAttribute("role", "img");
      svg.setAttribute("aria-label", "open tasks over the last minutes");
      // The x axis spans the samples taken (up to five minutes).
      const span = Math.max(points.length - 1, 1);
      series.forEach(([key, , color]) => {
        if (!points.some((p) => p.v[key])) return;
        const line = document.createElementNS(svgNS, "polyline");
        const offset = points.length === 1 ? 1 : 0;
        line.setAttribute("points", points.map((p, i) =>
          `${((offset + i) / span * w).toFixed(1)},${(h - 4 - (p.v[key] || 0) / top * (h - 8)).toFixed(1)}`).join(" "));
        line.setAttribute("fill", "none");
        line.setAttribute("stroke", color);
        line.setAttribute("stroke-width", "2");
        line.setAttribute("vector-effect", "non-scaling-stroke");
        svg.appendChild(line);
      });
      const legend = document.createElement("div");
      legend.className = "legend";
      const last = points.length ? points[points.length - 1].v : {};
      series.forEach(([key, label, color]) => {
        const item = document.createElement("span");
        const swatch = document.createElement("i");
        swatch.style.background = color;
        item.appendChild(swatch);
        item.appendChild(document.createTextNode(`${label} ${last[key] || 0}`));
        legend.appendChild(item);
      });
      const max = document.createElement("span");
      const seconds = points.length > 1 ? Math.round((points[points.length - 1].t - points[0].t) / 1000) : 0;
      max.textContent = `scale 0–${top}, last ${seconds}s (up to ${Math.round(maxPoints * refreshMs / 60000)} min)`;
      legend.appendChild(max);
      box.replaceChildren(svg, legend);
    });
  }

  async function refresh() {
    if (!document.querySelector("[data-live]") || document.hidden) return;
    try {
      const res = await fetch(location.href, { credentials: "same-origin", headers: { "X-Requested-With": "fetch" } });
      if (!res.ok) return;
      const doc = new DOMParser().parseFromString(await res.text(), "text/html");
      document.querySelectorAll("[data-live][id]").forEach((el) => {
        const fresh = doc.getElementById(el.id);
        if (fresh) el.replaceWith(document.importNode(fresh, true));
      });
      refreshes++;
      document.body.dataset.refreshes = String(refreshes);
      sample();
    } catch (e) { /* the next refresh tries again */ }
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

  document.addEventListener("click", async (ev) => {
    const btn = ev.target.closest("button[data-post]");
    if (!btn) return;
    ev.preventDefault();
    btn.disabled = true;
    try {
      await post(btn.dataset.post, JSON.parse(btn.dataset.body || "{}"));
      toast(btn.textContent.trim() + ": done");
      await refresh();
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
          toast(data.message);
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

  document.body.dataset.refreshes = "0";
  sample();
  setInterval(refresh, refreshMs);
  document.body.dataset.ready = "1";
})();
