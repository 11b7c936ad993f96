// agentrl view: line charts drawn as SVG by hand (no charting library: nothing to vendor or fetch).
"use strict";
(function () {

AR.niceTicks = function (lo, hi, count) {
  const span = hi - lo;
  const raw = span / Math.max(1, count);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => span / s <= count) || 10 * mag;
  const ticks = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) ticks.push(+t.toPrecision(12));
  return ticks;
};

// Labels for axis ticks, as many digits as it takes to tell them apart (an entropy of 7.5124..7.5128 read
// 7.512 on every tick).
AR.tickLabels = function (ticks) {
  let labels = ticks.map(AR.fmt);
  for (let p = 5; p <= 12 && new Set(labels).size < labels.length; p++) {
    labels = ticks.map((t) => String(parseFloat(t.toPrecision(p))));
  }
  return labels;
};

// Exponential moving average, debiased at the start (as TensorBoard's smoothing slider).
AR.smooth = function (points, weight) {
  if (!weight) return points;
  let last = 0, n = 0;
  return points.map(([x, y]) => {
    if (y === null) return [x, null];
    last = last * weight + (1 - weight) * y;
    n += 1;
    return [x, last / (1 - Math.pow(weight, n))];
  });
};

// The points of `key` in metrics rows (a row per step; evaluation rows too): [[step, value]].
AR.points = (rows, key) => rows.filter((row) => key in row).map((row) => [row.step, row[key]]);

AR.extent = function (values) {
  const v = values.filter((x) => x !== null && Number.isFinite(x));
  if (!v.length) return [0, 1];
  let lo = Math.min(...v), hi = Math.max(...v);
  if (lo === hi) {
    const pad = Math.abs(lo) * 0.1 || 1;
    return [lo - pad, hi + pad];
  }
  const pad = (hi - lo) * 0.05;
  return [lo - pad, hi + pad];
};

const SVG_NS = "http://www.w3.org/2000/svg";
const W = 440, H = 240, M = { l: 58, r: 14, t: 12, b: 30 };

function pathOf(points, sx, sy) {
  let d = "", pen = false;
  for (const [x, y] of points) {
    if (y === null || !Number.isFinite(y)) { pen = false; continue; }
    d += `${pen ? "L" : "M"}${sx(x).toFixed(1)},${sy(y).toFixed(1)}`;
    pen = true;
  }
  return d;
}

// A <figure> with one metric of several runs: series = [{name, color, points}]; xLabel names the x axis.
AR.lineChart = function (title, series, smoothing, xLabel = "step") {
  const fig = document.createElement("figure");
  fig.className = "chart";
  fig.dataset.metric = title;
  const xs = series.flatMap((s) => s.points.map((p) => p[0]));
  const ys = series.flatMap((s) => s.points.map((p) => p[1]));
  const [x0, x1] = xs.length ? [Math.min(...xs), Math.max(...xs)] : [0, 1];
  const [y0, y1] = AR.extent(ys);
  const sx = (x) => M.l + ((x - x0) / (x1 - x0 || 1)) * (W - M.l - M.r);
  const sy = (y) => H - M.b - ((y - y0) / (y1 - y0)) * (H - M.t - M.b);
  let svg = `<svg xmlns="${SVG_NS}" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="${AR.esc(title)}">`;
  const yt = AR.niceTicks(y0, y1, 5);
  AR.tickLabels(yt).forEach((label, i) => {
    svg += `<line class="grid" x1="${M.l}" x2="${W - M.r}" y1="${sy(yt[i])}" y2="${sy(yt[i])}"/>`;
    svg += `<text class="tick" x="${M.l - 6}" y="${sy(yt[i]) + 4}" text-anchor="end">${label}</text>`;
  });
  const xt = x1 > x0 ? AR.niceTicks(x0, x1, 6).filter((t) => Number.isInteger(t)) : [x0];
  for (const t of xt) svg += `<text class="tick" x="${sx(t)}" y="${H - M.b + 16}" text-anchor="middle">${t}</text>`;
  svg += `<text class="axis" x="${W - M.r}" y="${H - 2}" text-anchor="end">${AR.esc(xLabel)}</text>`;
  series.forEach((s, i) => {
    const shown = AR.smooth(s.points, smoothing);
    if (smoothing) svg += `<path class="line raw" d="${pathOf(s.points, sx, sy)}" stroke="${s.color}"/>`;
    svg += `<path class="line" data-run="${i}" d="${pathOf(shown, sx, sy)}" stroke="${s.color}"/>`;
    if (s.points.length <= 40) {
      for (const [x, y] of shown) {
        if (y !== null && Number.isFinite(y)) svg += `<circle cx="${sx(x)}" cy="${sy(y)}" r="2.6" fill="${s.color}"/>`;
      }
    }
  });
  svg += `<line class="cursor" y1="${M.t}" y2="${H - M.b}" visibility="hidden"/>`;
  svg += `<rect class="hover" x="${M.l}" y="${M.t}" width="${W - M.l - M.r}" height="${H - M.t - M.b}"/></svg>`;
  fig.innerHTML = `<figcaption>${AR.esc(title)}</figcaption>${svg}`;
  hover(fig, series, sx, x0, x1);
  return fig;
};

// Hovering a chart shows the value of every run at the nearest step.
function hover(fig, series, sx, x0, x1) {
  const rect = fig.querySelector("rect.hover");
  const cursor = fig.querySelector("line.cursor");
  const tip = document.getElementById("tooltip");
  const steps = [...new Set(series.flatMap((s) => s.points.map((p) => p[0])))].sort((a, b) => a - b);
  rect.addEventListener("mousemove", (ev) => {
    if (!steps.length) return;
    const box = rect.getBoundingClientRect();
    const x = x0 + ((ev.clientX - box.left) / box.width) * (x1 - x0);
    const step = steps.reduce((best, s) => (Math.abs(s - x) < Math.abs(best - x) ? s : best), steps[0]);
    cursor.setAttribute("x1", sx(step));
    cursor.setAttribute("x2", sx(step));
    cursor.setAttribute("visibility", "visible");
    const lines = series.map((s) => {
      const p = s.points.filter((q) => q[0] === step).pop();
      return p ? `<div><i style="background:${s.color}"></i>${AR.esc(s.name)}: ${AR.fmt(p[1])}</div>` : "";
    });
    tip.innerHTML = `<b>step ${step}</b>${lines.join("")}`;
    tip.hidden = false;
    tip.style.left = `${ev.pageX + 14}px`;
    tip.style.top = `${ev.pageY + 10}px`;
  });
  rect.addEventListener("mouseleave", () => {
    cursor.setAttribute("visibility", "hidden");
    tip.hidden = true;
  });
}
})();
