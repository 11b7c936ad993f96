// agentrl view: a run's doctor report (doctor.json: `agentrl doctor CONFIG --out DIR`, or a run's first
// step): one row per check with its status coloured (pass green, warn amber, fail red, skip grey; any
// other status as it is, uncoloured), what it saw and what to change, its details folded; then the
// notes and the facts of what the doctor played. Every text is escaped (a summary may quote model output).
"use strict";
(function () {
  const KNOWN = ["pass", "warn", "fail", "skip"];

  // A status as a coloured badge (the class only from KNOWN: a status is text from the file).
  AR.statusBadge = function (status, text) {
    const cls = KNOWN.includes(status) ? status : "other";
    return `<span class="status status-${cls}">${AR.esc(text ?? status)}</span>`;
  };

  AR.hasDoctor = () => AR.store.doctors.some((d) => d && d.state !== "missing");

  // "1 fail, 2 warn" for a run chip; "" without a report.
  AR.doctorBrief = function (d) {
    if (!d || d.state === "missing") return "";
    if (d.state !== "ok") return "doctor.json unreadable";
    const bad = ["fail", "warn"].map((s) => [s, d.report.checks.filter((c) => c.status === s).length]).filter(([, n]) => n);
    return bad.length ? `doctor: ${bad.map(([s, n]) => `${n} ${s}`).join(", ")}` : "doctor: ok";
  };

  // "1 fail, 1 warn, 4 pass, 1 skip" (as `agentrl doctor` prints it), then any other status.
  function counts(checks) {
    const seen = [...new Set(["fail", "warn", "pass", "skip", ...checks.map((c) => c.status)])];
    return seen.map((s) => [s, checks.filter((c) => c.status === s).length]).filter(([, n]) => n)
      .map(([s, n]) => `${n} ${AR.esc(s)}`).join(", ");
  }

  function fact(v) {
    return v !== null && typeof v === "object" ? JSON.stringify(v) : AR.fmt(v);
  }

  function hasDetails(d) {
    return d !== null && d !== undefined && !(typeof d === "object" && Object.keys(d).length === 0);
  }

  function row(c) {
    const advice = c.advice ? `<div class="check-advice">→ ${AR.esc(c.advice)}</div>` : "";
    const details = hasDetails(c.details)
      ? `<details class="check-details"><summary>details</summary><pre>${AR.esc(JSON.stringify(c.details, null, 2))}</pre></details>` : "";
    return `<tr class="check" data-check="${AR.esc(c.name)}"><td class="check-name">${AR.esc(c.name)}</td>` +
      `<td>${AR.statusBadge(c.status)}</td><td><div class="check-summary">${AR.esc(c.summary)}</div>${advice}${details}</td></tr>`;
  }

  function report(rep) {
    const head = `<p class="doctor-head">${AR.statusBadge(rep.ok ? "pass" : "fail", rep.ok ? "ok" : "failed")} ` +
      `<span class="muted">${counts(rep.checks)}</span></p>`;
    const warning = rep.warning ? `<div class="note-box">${AR.esc(rep.warning)}</div>` : "";
    const rows = rep.checks.map(row).join("");
    const table = rows ? `<table class="doctor-checks"><thead><tr><th>check</th><th>result</th><th>what it saw / what to change</th></tr></thead><tbody>${rows}</tbody></table>`
      : `<p class="muted">the report holds no checks</p>`;
    const notes = rep.notes.length ? `<h4>notes</h4><ul class="doctor-notes">${rep.notes.map((n) => `<li>${AR.esc(n)}</li>`).join("")}</ul>` : "";
    const facts = Object.entries(rep.facts || {});
    const kvs = facts.length ? `<h4>facts</h4><div class="kvs doctor-facts">${facts.map(([k, v]) =>
      `<div class="kv"><span>${AR.esc(k)}</span><b>${AR.esc(fact(v))}</b></div>`).join("")}</div>` : "";
    return head + warning + table + notes + kvs;
  }

  // One run's section of the Doctor tab; where: {r, name, path}.
  AR.renderDoctor = function (d, where) {
    const state = d ? d.state : "missing";
    let body;
    if (state === "ok") body = report(d.report);
    else if (state === "error") body = `<p class="error doctor-error">${AR.esc(d.error)}</p>`;
    else body = `<p class="muted doctor-missing">no doctor report: <code>agentrl doctor CONFIG --out ${AR.esc(where.path)}</code></p>`;
    return `<section class="doctor" data-run="${where.r}" data-state="${AR.esc(state)}">` +
      `<h3><i class="dot" style="background:${AR.color(where.r)}"></i>${AR.esc(where.name)} · doctor</h3>${body}</section>`;
  };
})();
