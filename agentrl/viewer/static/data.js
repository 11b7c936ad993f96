// agentrl view: where the page's data comes from. Served: the JSON API of agentrl/viewer/server.py,
// polled for what a live run appends. Exported (--export): the JSON inlined in the page, no network.
"use strict";
const AR = (window.AR = {});

AR.COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563", "#be185d"];
AR.POLL_MS = 2000;

// runs[r]: summary; metrics[r]: rows; episodes[r]: summaries; evals[r]: [{name, report, episodes}];
// doctors[r]: {state: "ok" | "error" | "missing", report | error} (the run's doctor.json);
// warmStarts[r]: {rows: [{step, loss, seconds, dev_accuracy?}], error} (warm_start.jsonl; no rows without one)
AR.store = { runs: [], metrics: [], episodes: [], evals: [], doctors: [], warmStarts: [], generation: [], evalStamp: [],
  doctorStamp: [], warmStamp: [], exported: null };

AR.esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);

AR.fmt = function (v) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  if (typeof v !== "number") return String(v);
  if (Number.isInteger(v)) return String(v);
  const a = Math.abs(v);
  if (a >= 1e5 || a < 1e-3) return v.toExponential(2);
  return String(parseFloat(v.toPrecision(4)));
};

AR.color = (r) => AR.COLORS[r % AR.COLORS.length];

AR.get = async function (path) {
  const res = await fetch(path, { credentials: "same-origin" });
  if (!res.ok) throw new Error(`${path}: HTTP ${res.status} ${await res.text()}`);
  return res.json();
};

// Everything at start: the inlined data of an exported page, or each run from the API.
AR.load = async function () {
  const s = AR.store;
  const inline = document.getElementById("agentrl-data");
  if (inline) {
    const d = JSON.parse(inline.textContent);
    s.exported = d;
    Object.assign(s, { runs: d.runs, metrics: d.metrics, episodes: d.episodes, evals: d.evals });
    s.doctors = d.doctors || d.runs.map(() => ({ state: "missing" }));
    s.warmStarts = d.warm_starts || d.runs.map(() => ({ rows: [], error: null }));
    return;
  }
  s.runs = await AR.get("api/runs");
  const polled = (await AR.get("api/poll")).runs;
  s.evalStamp = polled.map((x) => JSON.stringify(x.evals));
  s.doctorStamp = polled.map((x) => x.doctor ?? null);
  s.warmStamp = polled.map((x) => x.warm_start ?? null);
  for (let r = 0; r < s.runs.length; r++) {
    s.metrics[r] = [];
    s.episodes[r] = [];
    s.generation[r] = s.runs[r].generation;
    await AR.fetchRun(r);
    await AR.fetchEvals(r);
    await AR.fetchDoctor(r);
    await AR.fetchWarmStart(r);
  }
};

// The rows and episodes run r appended since we last asked (all of them after a rewrite).
AR.fetchRun = async function (r) {
  const s = AR.store;
  const m = await AR.get(`api/runs/${r}/metrics?since=${s.metrics[r].length}`);
  const e = await AR.get(`api/runs/${r}/episodes?since=${s.episodes[r].length}`);
  if (m.generation !== s.generation[r] || e.generation !== s.generation[r]) {
    s.generation[r] = m.generation;
    s.metrics[r] = [];
    s.episodes[r] = [];
    return AR.fetchRun(r);
  }
  s.metrics[r].push(...m.rows);
  s.episodes[r].push(...e.episodes);
  return m.rows.length + e.episodes.length > 0;
};

AR.fetchEvals = async function (r) {
  AR.store.evals[r] = await AR.get(`api/runs/${r}/evals`);
};

AR.fetchDoctor = async function (r) {
  AR.store.doctors[r] = await AR.get(`api/runs/${r}/doctor`);
};

AR.fetchWarmStart = async function (r) {
  AR.store.warmStarts[r] = await AR.get(`api/runs/${r}/warm_start`);
};

// One episode record: src "s" = samples.jsonl, "e<k>" = eval report k.
AR.record = async function (r, src, i) {
  const d = AR.store.exported;
  if (src === "s") return d ? d.records[r][i] : AR.get(`api/runs/${r}/episodes/${i}`);
  const k = Number(src.slice(1));
  return d ? d.evals[r][k].records[i] : AR.get(`api/runs/${r}/evals/${k}/episodes/${i}`);
};

AR.summaries = function (r, src) {
  if (src === "s") return AR.store.episodes[r] || [];
  const ev = (AR.store.evals[r] || [])[Number(src.slice(1))];
  return ev ? ev.episodes : [];
};

// Ask the server what changed; fetch it; true when anything did.
AR.poll = async function () {
  const s = AR.store;
  const p = await AR.get("api/poll");
  let changed = false;
  for (let r = 0; r < p.runs.length; r++) {
    const now = p.runs[r];
    if (now.generation !== s.generation[r] || now.metrics !== s.metrics[r].length || now.episodes !== s.episodes[r].length) {
      changed = (await AR.fetchRun(r)) || changed;
    }
    const stamp = JSON.stringify(now.evals);
    if (stamp !== s.evalStamp[r]) {
      s.evalStamp[r] = stamp;
      await AR.fetchEvals(r);
      changed = true;
    }
    if ((now.doctor ?? null) !== s.doctorStamp[r]) {
      s.doctorStamp[r] = now.doctor ?? null;
      await AR.fetchDoctor(r);
      changed = true;
    }
    if ((now.warm_start ?? null) !== s.warmStamp[r]) {
      s.warmStamp[r] = now.warm_start ?? null;
      await AR.fetchWarmStart(r);
      changed = true;
    }
  }
  return changed;
};

AR.startPolling = function (onChange) {
  const live = document.getElementById("live");
  if (AR.store.exported) {
    live.textContent = "exported page (not live)";
    return;
  }
  const tick = async () => {
    try {
      const changed = await AR.poll();
      live.textContent = `live · checked ${new Date().toLocaleTimeString()}`;
      live.classList.remove("error");
      if (changed) onChange();
    } catch (err) {
      live.textContent = `server not answering (${err.message.slice(0, 80)})`;
      live.classList.add("error");
    }
    setTimeout(tick, AR.POLL_MS);
  };
  setTimeout(tick, AR.POLL_MS);
};
