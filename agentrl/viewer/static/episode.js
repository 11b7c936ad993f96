// agentrl view: one episode record (docs/trajectories.md) as a page: its header, per-turn rewards,
// the transcript by role (prompt, trained actions, masked feedback) as text or token by token, the
// tool calls of each turn folded open, and whatever else the env put in info.
"use strict";
(function () {
  const ROLE_NOTE = {
    prompt: "not trained",
    action: "trained",
    feedback: "masked: not in the loss",
  };

  function piece(text) {
    if (text === "") return '<span class="tok-empty">∅</span>';
    return AR.esc(text).replace(/\n/g, '<span class="nl">↵</span>\n').replace(/\t/g, "→\t");
  }

  function gapOf(seg, i) {
    const lp = seg.logprobs[i];
    const llp = seg.learner_logprobs ? seg.learner_logprobs[i] : null;
    return lp === undefined || llp === null || llp === undefined ? null : Math.abs(lp - llp);
  }

  // Tokens as spans: class tok-<role>; tok-mismatch where |engine - learner| > threshold.
  function tokens(seg, threshold) {
    return seg.tokens
      .map((t, i) => {
        const gap = gapOf(seg, i);
        const tip = [`id ${seg.token_ids[i]}`];
        if (seg.logprobs[i] !== undefined) tip.push(`engine ${seg.logprobs[i].toFixed(3)}`);
        if (gap !== null) tip.push(`learner ${seg.learner_logprobs[i].toFixed(3)}`, `|Δ| ${gap.toFixed(3)}`);
        const cls = `tok tok-${seg.role}${gap !== null && gap > threshold ? " tok-mismatch" : ""}`;
        return `<span class="${cls}" title="${AR.esc(tip.join(" · "))}">${piece(t)}</span>`;
      })
      .join("");
  }

  function body(seg, mode, threshold) {
    if (mode === "tokens" && seg.tokens.length) return `<div class="body tokens">${tokens(seg, threshold)}</div>`;
    return `<div class="body text"><span class="tok tok-${seg.role}">${AR.esc(seg.text)}</span></div>`;
  }

  function mismatches(seg, threshold) {
    let n = 0;
    for (let i = 0; i < seg.token_ids.length; i++) {
      const g = gapOf(seg, i);
      if (g !== null && g > threshold) n++;
    }
    return n;
  }

  function call(c, open) {
    const name = c.name === null || c.name === undefined ? "(unreadable call)" : c.name;
    const args = c.arguments === null || c.arguments === undefined ? "" : JSON.stringify(c.arguments);
    const head = `<span class="call-name">${AR.esc(name)}</span>(${AR.esc(args.length > 80 ? args.slice(0, 80) + "…" : args)})`;
    const result = String(c.result ?? "");
    const short = result.length > 60 ? result.slice(0, 60) + "…" : result;
    return (
      `<details class="call${c.error ? " call-error" : ""}"${open ? " open" : ""} data-turn="${c.turn}">` +
      `<summary>tool call ${head} → <code>${AR.esc(short)}</code></summary>` +
      `<div class="call-body">${args ? `<div class="label">arguments</div><pre>${AR.esc(JSON.stringify(c.arguments, null, 2))}</pre>` : ""}` +
      `<div class="label">result${c.error ? " (error)" : ""}</div><pre class="call-result">${AR.esc(result)}</pre></div></details>`
    );
  }

  function segment(rec, seg, opts) {
    const n = seg.token_ids.length || seg.tokens.length;
    const count = n ? `${n} tokens · ` : "";
    let head = `<span class="role">${seg.role === "action" ? `turn ${seg.turn + 1} · action` : seg.role}</span> ${count}<span class="note">${ROLE_NOTE[seg.role]}</span>`;
    if (seg.role === "action") {
      if (seg.version !== null && seg.version !== undefined) head += ` · policy v${seg.version}`;
      if (seg.learner_logprobs && !opts.compact) head += ` · ${mismatches(seg, opts.threshold)} tokens |Δ| > ${opts.threshold}`;
      const r = rec.turn_rewards[seg.turn];
      if (r !== undefined) head += ` <span class="turn-reward" data-turn="${seg.turn}">reward ${AR.fmt(r)}</span>`;
    }
    const text = body(seg, opts.mode, opts.threshold);
    if (seg.role === "prompt") {
      return `<details class="seg seg-prompt" data-role="prompt"${opts.openPrompt ? " open" : ""}><summary class="seg-head">${head}</summary>${text}</details>`;
    }
    let out = `<div class="seg seg-${seg.role}" data-role="${seg.role}" data-turn="${seg.turn}"><div class="seg-head">${head}</div>${text}</div>`;
    if (seg.role === "action") {
      const calls = rec.tool_calls.filter((c) => c.turn === seg.turn);
      if (calls.length) out += `<div class="calls">${calls.map((c) => call(c, !opts.compact)).join("")}</div>`;
    }
    return out;
  }

  function looksLikeDiff(text) {
    return /^(diff --git|--- |\+\+\+ |@@ )/m.test(text);
  }

  function value(v, key) {
    if (v === null || v === undefined) return "<code>null</code>";
    if (typeof v === "string") {
      if (key === "diff" || looksLikeDiff(v)) {
        const lines = v.split("\n").map((l) => {
          const cls = l.startsWith("+") ? "add" : l.startsWith("-") ? "del" : l.startsWith("@@") ? "hunk" : "";
          return `<span class="${cls}">${AR.esc(l)}</span>`;
        });
        return `<pre class="diff">${lines.join("\n")}</pre>`;
      }
      return v.includes("\n") || v.length > 80 ? `<pre>${AR.esc(v)}</pre>` : `<code>${AR.esc(v)}</code>`;
    }
    if (typeof v !== "object") return `<code>${AR.esc(String(v))}</code>`;
    if (Array.isArray(v)) return `<ol class="info-list">${v.map((x) => `<li>${value(x, "")}</li>`).join("")}</ol>`;
    const rows = Object.entries(v).map(([k, x]) => `<tr><th>${AR.esc(k)}</th><td>${value(x, k)}</td></tr>`);
    return `<table class="info-table">${rows.join("")}</table>`;
  }

  function info(rec) {
    const keys = Object.keys(rec.info || {});
    if (!keys.length) return "";
    const items = keys.map((k) => `<details class="info-item" open data-key="${AR.esc(k)}"><summary>${AR.esc(k)}</summary>${value(rec.info[k], k)}</details>`);
    return `<section class="info"><h3>info</h3>${items.join("")}</section>`;
  }

  function header(rec, where) {
    const versions = [...new Set(rec.segments.filter((s) => s.role === "action" && s.version !== null && s.version !== undefined).map((s) => s.version))];
    const kv = [
      ["run", where.run], ["step", rec.step], ["split", rec.split], ["task", rec.task_id], ["group", rec.group_id],
      ["reward", AR.fmt(rec.reward)], ["turns", rec.turns], ["end reason", rec.end_reason || "–"],
      ["terminated", rec.terminated], ["truncated", rec.truncated], ["policy versions", versions.join(", ") || "–"],
    ];
    if (rec.dataset) kv.push(["dataset", rec.dataset]);
    if (rec.difficulty) kv.push(["difficulty", rec.difficulty]);
    kv.push(["record version", rec.version]);
    let html = `<div class="kvs">${kv.map(([k, v]) => `<div class="kv"><span>${k}</span><b>${AR.esc(v ?? "–")}</b></div>`).join("")}</div>`;
    if (rec.failed || rec.error) html += `<div class="failure"><b>${rec.failed ? "failed" : "error"}</b> ${AR.esc(rec.error || "")}</div>`;
    const comps = Object.entries(rec.reward_components || {});
    if (comps.length) html += `<div class="chips">reward components: ${comps.map(([k, v]) => `<span class="chip">${AR.esc(k)} ${AR.fmt(v)}</span>`).join("")}</div>`;
    if (rec.turn_rewards.length) {
      html += `<div class="chips turn-rewards">per-turn rewards: ${rec.turn_rewards.map((r, t) => `<span class="chip" data-turn="${t}">turn ${t + 1}: ${AR.fmt(r)}</span>`).join("")}</div>`;
    }
    if (rec.version < 2) html += `<div class="note-box">written before records had tokens (record version ${rec.version}): text only</div>`;
    return html;
  }

  AR.legend = (threshold) =>
    `<div class="legend"><span class="tok tok-prompt">prompt</span><span class="tok tok-action">action (trained)</span>` +
    `<span class="tok tok-feedback">feedback (masked)</span><span class="tok tok-action tok-mismatch">|engine − learner| &gt; ${threshold}</span></div>`;

  // The whole page of one episode; opts: {mode: "tokens" | "text", threshold, openPrompt}.
  AR.renderEpisode = function (rec, where, opts) {
    const segs = rec.segments.map((s) => segment(rec, s, opts)).join("");
    return `<article class="episode" data-task="${AR.esc(rec.task_id)}">${header(rec, where)}${AR.legend(opts.threshold)}<div class="transcript">${segs}</div>${info(rec)}</article>`;
  };

  // A narrow column for side-by-side comparison (text mode, prompt and tool calls folded).
  AR.renderColumn = function (rec, where) {
    const segs = rec.segments.map((s) => segment(rec, s, { mode: "text", threshold: Infinity, openPrompt: false, compact: true })).join("");
    const head = `<div class="col-head"><b>${AR.esc(where.run)}</b> · step ${AR.esc(rec.step ?? "–")} · ${AR.esc(rec.split)} · reward ${AR.fmt(rec.reward)} · ${AR.esc(rec.end_reason || "–")}</div>`;
    return `<article class="episode column" data-task="${AR.esc(rec.task_id)}">${head}<div class="transcript">${segs}</div></article>`;
  };
})();
