// pgtask dashboard: partial refresh, charts and actions, without dependencies.
// Pages work without this script (they are server-rendered); it adds:
//  - live refresh: every data-refresh ms the page is fetched again and each element
//    with data-live and an id is replaced by its new version (nothing else moves, so
//    forms being filled are left alone);
//  - charts: each data-chart element draws its data-series (JSON: tasks pushed and
//    completed by result in each second of the last minutes), redrawn at each refresh;
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

  function toast(text, isError) {
    const el = document.getElementById("toast");
    if (!el) return;
    el.textContent = text;
    el.className = "show" + (isError ? " error" : "");
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => { el.className = ""; }, isError ? 8000 : 3000);
  }

  const svgNS = "http://www.w3.org/2000/svg";
  // draw draws each data-chart element's data-series: per second, how many tasks were
  // pushed and completed by result (the server's tallies of the last minutes).
  function draw() {
    document.querySelectorAll("[data-chart]").forEach((box) => {
      let data;
      try { data = JSON.parse(box.dataset.series); } catch (e) { return; }
      const n = (data.pushed || []).length;
      const w = box.clientWidth || 600, h = 130;
      let top = 1;
      series.forEach(([k]) => (data[k] || []).forEach((v) => { top = Math.max(top, v); }));
      const svg = document.createElementNS(svgNS, "svg");
      svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
      svg.setAttribute("preserveAspectRatio", "none");
      svg.setAttribute("role", "img");
      svg.setAttribute("aria-label", "tasks pushed and completed per second over the last minutes");
      const span = Math.max(n - 1, 1);
      series.forEach(([key, , color]) => {
        const values = data[key] || [];
        if (!values.some((v) => v > 0)) return;
        const line = document.createElementNS(svgNS, "polyline");
        line.setAttribute("points", values.map((v, i) =>
          `${(i / span * w).toFixed(1)},${(h - 4 - v / top * (h - 8)).toFixed(1)}`).join(" "));
        line.setAttribute("fill", "none");
        line.setAttribute("stroke", color);
        line.setAttribute("stroke-width", "2");
        line.setAttribute("vector-effect", "non-scaling-stroke");
        line.dataset.series = key;
        svg.appendChild(line);
      });
      const legend = document.createElement("div");
      legend.className = "legend";
      series.forEach(([key, label, color]) => {
        const values = data[key] || [];
        const total = values.reduce((a, v) => a + v, 0);
        const item = document.createElement("span");
        const swatch = document.createElement("i");
        swatch.style.background = color;
        item.appendChild(swatch);
        item.appendChild(document.createTextNode(`${label} ${total.toLocaleString()}`));
        item.dataset.series = key;
        item.dataset.total = String(total);
        legend.appendChild(item);
      });
      const scale = document.createElement("span");
      scale.textContent = `scale 0–${top.toLocaleString()}/s, totals over the last ${Math.round(n / 60)} min`;
      legend.appendChild(scale);
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
      draw();
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
  draw();
  setInterval(refresh, refreshMs);
  document.body.dataset.ready = "1";
})();
