// agentrl view: the tabs (curves, episodes, eval, doctor), an episode's page and side-by-side comparison,
// routed by the URL's #fragment so that the exported file works the same from file://.
"use strict";
(function () {
  const OVERVIEW = ["reward/mean", "eval/accuracy", "kl", "loss/kl", "loss/entropy", "response_length/mean",
    "staleness/mean", "mismatch/logprob_abs_diff_mean", "time/step"];
  const PRESETS = {
    overview: (keys) => OVERVIEW.filter((k) => keys.includes(k)),
    "off-policy": (keys) => keys.filter((k) => /^(staleness|mismatch)\//.test(k)),
    "seconds per stage": (keys) => keys.filter((k) => k.startsWith("time/")),
    eval: (keys) => keys.filter((k) => k.startsWith("eval/")),
    none: () => [],
  };
  const ui = {
    chosen: null, touched: false, filter: "", smoothing: 0,
    ep: { run: "all", split: "all", stepMin: "", stepMax: "", rewardMin: "", rewardMax: "", end: "all", task: "", sort: "step", desc: false },
    selected: new Set(), mode: "tokens", threshold: 0.5, openPrompt: false,
    evalSel: { dataset: "all", difficulty: "all" }, tab: "curves",
  };
  const main = () => document.getElementById("main");
  const runName = (r) => (AR.store.runs[r] || {}).name || `run ${r}`;

  // ------------------------------------------------------------------ header
  function renderRuns() {
    document.getElementById("runs").innerHTML = AR.store.runs
      .map((run, r) => {
        const cfg = Object.entries(run.config || {}).map(([k, v]) => `${k}: ${v}`).join("\n");
        const steps = AR.store.metrics[r].filter((x) => "reward/mean" in x).length;
        const doctor = AR.doctorBrief(AR.store.doctors[r]);
        return `<span class="run-chip" title="${AR.esc(run.path + "\n" + cfg)}"><i style="background:${AR.color(r)}"></i>${AR.esc(run.name)} <span class="muted">${steps} steps · ${AR.store.episodes[r].length} episodes${doctor ? ` · ${AR.esc(doctor)}` : ""}</span></span>`;
      })
      .join("");
    const problems = AR.store.runs.flatMap((run) => (run.problems || []).map((p) => `${run.name}: ${p}`));
    if (problems.length) document.getElementById("runs").innerHTML += `<span class="warn" title="${AR.esc(problems.join("\n"))}">${problems.length} unreadable lines</span>`;
    document.querySelector('#tabs a[data-tab="doctor"]').hidden = !AR.hasDoctor();
  }

  // ------------------------------------------------------------------ curves
  function metricKeys() {
    const keys = new Set();
    AR.store.metrics.forEach((rows) => rows.forEach((row) => Object.keys(row).forEach((k) => k !== "step" && keys.add(k))));
    return [...keys].sort();
  }

  function mountCurves() {
    main().innerHTML =
      `<div class="curves"><aside class="metric-list"><div class="presets">${Object.keys(PRESETS).map((p) => `<button data-preset="${p}">${p}</button>`).join("")}</div>` +
      `<input id="metric-filter" placeholder="filter metrics" value="${AR.esc(ui.filter)}">` +
      `<label class="smoothing">smoothing <input id="smoothing" type="range" min="0" max="0.99" step="0.01" value="${ui.smoothing}"></label>` +
      `<div id="metric-boxes"></div></aside><section id="charts" class="charts"></section></div>`;
    main().querySelectorAll("[data-preset]").forEach((b) =>
      b.addEventListener("click", () => { ui.touched = true; ui.chosen = new Set(PRESETS[b.dataset.preset](metricKeys())); updateCurves(); }));
    document.getElementById("metric-filter").addEventListener("input", (ev) => { ui.filter = ev.target.value; updateCurves(); });
    document.getElementById("smoothing").addEventListener("input", (ev) => { ui.smoothing = Number(ev.target.value); updateCurves(); });
    updateCurves();
  }

  function updateCurves() {
    const keys = metricKeys();
    if (!ui.touched) ui.chosen = new Set(PRESETS.overview(keys)); // until the user chooses, the overview as it grows
    const shown = keys.filter((k) => k.toLowerCase().includes(ui.filter.toLowerCase()));
    const groups = {};
    shown.forEach((k) => (groups[k.includes("/") ? k.split("/")[0] : "other"] ||= []).push(k));
    const boxes = document.getElementById("metric-boxes");
    boxes.innerHTML = Object.entries(groups)
      .map(([g, ks]) => `<div class="group"><div class="group-name">${AR.esc(g)}</div>${ks.map((k) =>
        `<label><input type="checkbox" data-key="${AR.esc(k)}"${ui.chosen.has(k) ? " checked" : ""}> ${AR.esc(k)}</label>`).join("")}</div>`)
      .join("");
    boxes.querySelectorAll("input[data-key]").forEach((box) => box.addEventListener("change", () => {
      ui.touched = true;
      box.checked ? ui.chosen.add(box.dataset.key) : ui.chosen.delete(box.dataset.key);
      drawCharts(keys);
    }));
    drawCharts(keys);
  }

  function drawCharts(keys) {
    const charts = document.getElementById("charts");
    charts.innerHTML = "";
    const warm = warmStartSection();
    if (warm) charts.append(warm, Object.assign(document.createElement("h3"), { className: "rl-head", textContent: "RL" }));
    const rank = (k) => (OVERVIEW.includes(k) ? OVERVIEW.indexOf(k) : OVERVIEW.length);
    const chosen = keys.filter((k) => ui.chosen.has(k)).sort((a, b) => rank(a) - rank(b) || a.localeCompare(b));
    if (!chosen.length) charts.insertAdjacentHTML("beforeend", `<p class="muted">${keys.length ? "choose metrics on the left" : "no metrics yet (metrics.jsonl is empty)"}</p>`);
    for (const key of chosen) {
      const series = AR.store.metrics.map((rows, r) => ({ name: runName(r), color: AR.color(r), points: AR.points(rows, key) }))
        .filter((s) => s.points.length);
      charts.appendChild(AR.lineChart(key, series, ui.smoothing));
    }
  }

  // The supervised warm start before RL (warm_start.jsonl), for the runs that had one: a line per run (steps,
  // seconds, best dev accuracy), then its train loss and dev accuracy by warm-start step; null when none had one.
  function warmStartSection() {
    const runs = AR.store.warmStarts.map((w, r) => ({ r, rows: (w && w.rows) || [], error: w && w.error }))
      .filter((w) => w.rows.length || w.error);
    if (!runs.length) return null;
    const notes = runs.map(({ r, rows, error }) => {
      const last = rows[rows.length - 1] || {};
      const accs = rows.map((x) => x.dev_accuracy).filter((a) => typeof a === "number");
      const said = rows.length ? [`${last.step} steps`, typeof last.seconds === "number" ? `${Math.round(last.seconds)} s` : "",
        accs.length ? `best dev accuracy ${AR.fmt(Math.max(...accs))}` : ""].filter(Boolean).join(", ") : "";
      return `<li><i class="dot" style="background:${AR.color(r)}"></i>${AR.esc(runName(r))}: ${AR.esc(said)}` +
        `${error ? ` <span class="error">${AR.esc(error)}</span>` : ""}</li>`;
    });
    const section = document.createElement("section");
    section.className = "warm-start";
    section.innerHTML = `<h3>Warm start <span class="muted">supervised on the env's reference answers, before RL</span></h3>` +
      `<ul class="warm-notes">${notes.join("")}</ul><div class="charts warm-charts"></div>`;
    for (const key of ["loss", "dev_accuracy"]) {
      const series = runs.map(({ r, rows }) => ({ name: runName(r), color: AR.color(r), points: AR.points(rows, key) }))
        .filter((x) => x.points.length);
      const smoothing = key === "loss" ? ui.smoothing : 0;
      if (series.length) section.lastChild.appendChild(AR.lineChart(`warm_start/${key}`, series, smoothing, "warm-start step"));
    }
    return section;
  }

  // ------------------------------------------------------------------ episodes
  function allEpisodes() {
    return AR.store.episodes.flatMap((eps, r) => eps.map((e) => ({ ...e, run: r, src: "s" })));
  }

  function num(v) {
    return v === "" || v === null || v === undefined ? null : Number(v);
  }

  function filtered(list, f) {
    const [s0, s1, r0, r1] = [num(f.stepMin), num(f.stepMax), num(f.rewardMin), num(f.rewardMax)];
    const out = list.filter((e) =>
      (f.run === "all" || String(e.run) === f.run) && (f.split === "all" || e.split === f.split) &&
      (s0 === null || (e.step ?? -Infinity) >= s0) && (s1 === null || (e.step ?? Infinity) <= s1) &&
      (r0 === null || e.reward >= r0) && (r1 === null || e.reward <= r1) &&
      (f.end === "all" || e.end_reason === f.end) && (!f.task || e.task_id.toLowerCase().includes(f.task.toLowerCase())));
    const dir = f.desc ? -1 : 1;
    return out.sort((a, b) => {
      const x = a[f.sort] ?? -Infinity, y = b[f.sort] ?? -Infinity;
      return (x < y ? -1 : x > y ? 1 : a.index - b.index) * dir;
    });
  }

  const COLUMNS = [["step", "step"], ["split", "split"], ["task_id", "task"], ["reward", "reward"], ["correct", "correct"], ["turns", "turns"],
    ["end_reason", "end reason"], ["action_tokens", "action tokens"], ["tool_calls", "tool calls"], ["group_id", "group"]];

  function table(list, f, onSort) {
    const head = COLUMNS.map(([k, label]) => `<th data-sort="${k}" class="${f.sort === k ? (f.desc ? "desc" : "asc") : ""}">${label}</th>`).join("");
    const rows = list.slice(0, 500).map((e) => {
      const id = `${e.run}:${e.src}:${e.index}`;
      const cells = COLUMNS.map(([k]) => `<td class="c-${k}">${AR.esc(typeof e[k] === "number" ? AR.fmt(e[k]) : e[k] ?? "–")}</td>`).join("");
      return `<tr data-id="${id}" class="${e.failed ? "failed" : ""}"><td><input type="checkbox" data-pick="${id}"${ui.selected.has(id) ? " checked" : ""}></td>` +
        `<td><i class="dot" style="background:${AR.color(e.run)}"></i></td>${cells}<td class="preview">${AR.esc(e.preview)}</td></tr>`;
    });
    const more = list.length > 500 ? `<p class="muted">showing 500 of ${list.length}: narrow the filters</p>`
      : list.length ? "" : `<p class="muted">no episodes here${AR.store.episodes.some((e) => e.length) ? " with these filters" : " yet: a run writes them every log.samples_every steps (samples.jsonl)"}</p>`;
    const html = `<table class="episodes"><thead><tr><th></th><th></th>${head}<th>response</th></tr></thead><tbody>${rows.join("")}</tbody></table>${more}`;
    const holder = document.createElement("div");
    holder.innerHTML = html;
    holder.querySelectorAll("th[data-sort]").forEach((th) => th.addEventListener("click", () => onSort(th.dataset.sort)));
    holder.querySelectorAll("tr[data-id]").forEach((tr) => tr.addEventListener("click", (ev) => {
      if (ev.target.matches("input")) return;
      const [r, src, i] = tr.dataset.id.split(":");
      location.hash = `#episode/${r}/${src}/${i}`;
    }));
    holder.querySelectorAll("input[data-pick]").forEach((box) => box.addEventListener("change", () => {
      box.checked ? ui.selected.add(box.dataset.pick) : ui.selected.delete(box.dataset.pick);
      const btn = document.getElementById("compare");
      if (btn) btn.textContent = `compare selected (${ui.selected.size})`;
    }));
    return holder;
  }

  function mountEpisodes() {
    const eps = allEpisodes();
    const ends = [...new Set(eps.map((e) => e.end_reason))].sort();
    const f = ui.ep;
    const opt = (v, label, cur) => `<option value="${AR.esc(v)}"${cur === v ? " selected" : ""}>${AR.esc(label)}</option>`;
    main().innerHTML =
      `<div class="filters">` +
      (AR.store.runs.length > 1 ? `<label>run <select data-f="run">${opt("all", "all", f.run)}${AR.store.runs.map((x, r) => opt(String(r), x.name, f.run)).join("")}</select></label>` : "") +
      `<label>split <select data-f="split">${["all", "train", "eval"].map((v) => opt(v, v, f.split)).join("")}</select></label>` +
      `<label>step <input data-f="stepMin" size="4" value="${AR.esc(f.stepMin)}"> – <input data-f="stepMax" size="4" value="${AR.esc(f.stepMax)}"></label>` +
      `<label>reward <input data-f="rewardMin" size="4" value="${AR.esc(f.rewardMin)}"> – <input data-f="rewardMax" size="4" value="${AR.esc(f.rewardMax)}"></label>` +
      `<label>end reason <select data-f="end">${opt("all", "all", f.end)}${ends.map((v) => opt(v, v, f.end)).join("")}</select></label>` +
      `<label>task <input data-f="task" size="14" value="${AR.esc(f.task)}"></label>` +
      `<button id="compare">compare selected (${ui.selected.size})</button><span id="ep-count" class="muted"></span></div><div id="ep-table"></div>`;
    main().querySelectorAll("[data-f]").forEach((el) => el.addEventListener("input", () => { f[el.dataset.f] = el.value; updateEpisodes(); }));
    document.getElementById("compare").addEventListener("click", () => {
      if (ui.selected.size) location.hash = `#compare/${[...ui.selected].join(",")}`;
    });
    updateEpisodes();
  }

  function updateEpisodes() {
    const f = ui.ep;
    const list = filtered(allEpisodes(), f);
    document.getElementById("ep-count").textContent = `${list.length} episodes`;
    const holder = document.getElementById("ep-table");
    holder.innerHTML = "";
    holder.appendChild(table(list, f, (k) => { f.desc = f.sort === k ? !f.desc : false; f.sort = k; updateEpisodes(); }));
  }

  // ------------------------------------------------------------------ one episode, side by side
  async function mountEpisode(r, src, i) {
    main().innerHTML = `<p class="muted">loading episode…</p>`;
    let rec;
    try {
      rec = await AR.record(r, src, i);
    } catch (err) {
      main().innerHTML = `<p class="error">${AR.esc(err.message)}</p>`;
      return;
    }
    const same = AR.summaries(r, src).filter((e) => e.task_id === rec.task_id);
    const bar =
      `<div class="ep-bar"><a href="#${src === "s" ? "episodes" : "eval"}">← back</a>` +
      `<label><input type="radio" name="mode" value="tokens"${ui.mode === "tokens" ? " checked" : ""}> tokens</label>` +
      `<label><input type="radio" name="mode" value="text"${ui.mode === "text" ? " checked" : ""}> text</label>` +
      `<label>highlight |engine − learner| log-prob &gt; <input id="threshold" type="number" step="0.05" min="0" value="${ui.threshold}"></label>` +
      `<label><input type="checkbox" id="open-prompt"${ui.openPrompt ? " checked" : ""}> show prompt</label>` +
      (same.length > 1 ? `<a id="same-task" href="#compare/${same.map((e) => `${r}:${src}:${e.index}`).slice(-8).join(",")}">same task across steps (${same.length})</a>` : "") +
      `</div><div id="episode-body"></div>`;
    main().innerHTML = bar;
    const draw = () => {
      document.getElementById("episode-body").innerHTML = AR.renderEpisode(rec, { run: runName(r) }, ui);
    };
    main().querySelectorAll("input[name=mode]").forEach((el) => el.addEventListener("change", () => { ui.mode = el.value; draw(); }));
    document.getElementById("threshold").addEventListener("input", (ev) => { ui.threshold = Number(ev.target.value) || 0; draw(); });
    document.getElementById("open-prompt").addEventListener("change", (ev) => { ui.openPrompt = ev.target.checked; draw(); });
    draw();
  }

  async function mountCompare(ids) {
    main().innerHTML = `<p class="muted">loading…</p>`;
    const parts = ids.split(",").filter(Boolean).map((id) => id.split(":"));
    const records = await Promise.all(parts.map(([r, src, i]) => AR.record(Number(r), src, Number(i))));
    const order = records.map((rec, k) => [rec, parts[k]]).sort((a, b) => (a[0].step ?? 0) - (b[0].step ?? 0));
    main().innerHTML = `<div class="ep-bar"><a href="#episodes">← episodes</a><span class="muted">${records.length} episodes side by side</span></div>` +
      `<div class="compare">${order.map(([rec, [r]]) => AR.renderColumn(rec, { run: runName(Number(r)) })).join("")}</div>`;
  }

  // ------------------------------------------------------------------ eval
  function evalTable(title, rows) {
    const entries = Object.entries(rows || {});
    if (!entries.length) return "";
    const cols = [...new Set(entries.flatMap(([, m]) => Object.keys(m)))].filter((c) => c.includes("@")).sort();
    const head = ["set", "tasks", "accuracy", ...cols, "mean reward", "length"].map((c) => `<th>${c}</th>`).join("");
    const body = entries.map(([name, m]) => `<tr><td>${AR.esc(name)}</td><td>${AR.fmt(m.tasks)}</td><td>${AR.fmt(m.accuracy)}</td>` +
      cols.map((c) => `<td>${AR.fmt(m[c])}</td>`).join("") + `<td>${AR.fmt(m.mean_reward)}</td><td>${AR.fmt(m.response_length)}</td></tr>`).join("");
    return `<h4>${title}</h4><table class="eval-table"><thead><tr>${head}</tr></thead><tbody>${body}</tbody></table>`;
  }

  function mountEval() {
    const blocks = [];
    AR.store.evals.forEach((evals, r) => (evals || []).forEach((ev, k) => blocks.push({ r, k, ev })));
    if (!blocks.length) {
      main().innerHTML = `<p class="muted">no eval.json in these runs: <code>agentrl eval --model RUN_DIR --out RUN_DIR/eval</code> writes one (held-out accuracy during training is on the Curves tab, its episodes in Episodes, split eval)</p>`;
      return;
    }
    main().innerHTML = blocks.map(({ r, k, ev }) => {
      const rep = ev.report;
      const skipped = Object.entries(rep.skipped || {}).map(([m, why]) => `<li>${AR.esc(m)}: ${AR.esc(why)}</li>`).join("");
      return `<section class="eval" data-run="${r}" data-report="${k}"><h3><i class="dot" style="background:${AR.color(r)}"></i>${AR.esc(runName(r))} · ${AR.esc(ev.name)}</h3>` +
        (rep.error ? `<p class="error">${AR.esc(rep.error)}</p>` : `<p class="muted">model ${AR.esc(rep.model)} · n=${AR.esc(rep.n_samples)} samples per task</p>`) +
        evalTable("overall", rep.overall ? { all: rep.overall } : {}) + evalTable("per dataset", rep.datasets) + evalTable("per difficulty", rep.difficulties) +
        (skipped ? `<ul class="muted">${skipped}</ul>` : "") + `<h4>episodes</h4><div class="eval-filters"></div><div class="eval-episodes"></div></section>`;
    }).join("");
    blocks.forEach(({ r, k, ev }) => {
      const section = main().querySelector(`section.eval[data-run="${r}"][data-report="${k}"]`);
      const list = ev.episodes.map((e) => ({ ...e, run: r, src: `e${k}` }));
      const values = (key) => [...new Set(list.map((e) => e[key] ?? "-"))].sort();
      const sel = ui.evalSel;
      const select = (key, label) => `<label>${label} <select data-e="${key}"><option value="all">all</option>${values(key).map((v) => `<option${sel[key] === v ? " selected" : ""}>${AR.esc(v)}</option>`).join("")}</select></label>`;
      section.querySelector(".eval-filters").innerHTML = select("dataset", "dataset") + select("difficulty", "difficulty");
      const f = { run: "all", split: "all", stepMin: "", stepMax: "", rewardMin: "", rewardMax: "", end: "all", task: "", sort: "task_id", desc: false };
      const draw = () => {
        const shown = list.filter((e) => (sel.dataset === "all" || (e.dataset ?? "-") === sel.dataset) && (sel.difficulty === "all" || (e.difficulty ?? "-") === sel.difficulty));
        const holder = section.querySelector(".eval-episodes");
        holder.innerHTML = "";
        holder.appendChild(table(filtered(shown, f), f, (key) => { f.desc = f.sort === key ? !f.desc : false; f.sort = key; draw(); }));
      };
      section.querySelectorAll("select[data-e]").forEach((el) => el.addEventListener("change", () => { sel[el.dataset.e] = el.value; draw(); }));
      draw();
    });
  }

  // ------------------------------------------------------------------ doctor
  function mountDoctor() {
    main().innerHTML = AR.store.runs.map((run, r) => AR.renderDoctor(AR.store.doctors[r], { r, name: runName(r), path: run.path })).join("");
  }

  // ------------------------------------------------------------------ routing
  // The first tab: the doctor's for directories that hold only its report (agentrl doctor --out).
  function firstTab() {
    const empty = AR.store.metrics.every((m) => !m.length) && AR.store.episodes.every((e) => !e.length);
    return empty && AR.hasDoctor() ? "doctor" : "curves";
  }

  function route() {
    const hash = location.hash.slice(1) || firstTab();
    const [tab, ...rest] = hash.split("/");
    ui.tab = tab;
    document.querySelectorAll("#tabs a").forEach((a) => a.classList.toggle("active", a.dataset.tab === tab || (tab === "episode" && a.dataset.tab === "episodes")));
    document.getElementById("tooltip").hidden = true;
    if (tab === "episode") return mountEpisode(Number(rest[0]), rest[1], Number(rest[2]));
    if (tab === "compare") return mountCompare(rest.join("/"));
    if (tab === "episodes") return mountEpisodes();
    if (tab === "eval") return mountEval();
    if (tab === "doctor") return mountDoctor();
    return mountCurves();
  }

  // New data from a live run: redraw what is on screen without losing the user's place.
  function refresh() {
    renderRuns();
    const tab = ui.tab;
    if (tab === "curves") updateCurves();
    else if (tab === "episodes") updateEpisodes();
    else if (tab === "eval") mountEval();
    else if (tab === "doctor") mountDoctor();
  }

  window.addEventListener("hashchange", route);
  window.addEventListener("DOMContentLoaded", async () => {
    try {
      await AR.load();
    } catch (err) {
      main().innerHTML = `<p class="error">cannot load the runs: ${AR.esc(err.message)}</p>`;
      return;
    }
    renderRuns();
    await route();
    document.body.dataset.ready = "1";
    AR.startPolling(refresh);
  });
})();
