// DOM builders of the console. Every text goes through text nodes (never
// innerHTML) and every link through safeUrl, so object contents cannot
// inject markup or script.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") el.className = v;
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
}

// http(s) URLs only (status.url comes from the server, but a link is never javascript:).
export function safeUrl(u) {
  return typeof u === "string" && /^https?:\/\/[^\s]+$/i.test(u) ? u : null;
}

export function link(url, text, attrs = {}) {
  const href = safeUrl(url);
  if (!href) return h("span", attrs, text || url || "");
  return h("a", { href, target: "_blank", rel: "noopener noreferrer", ...attrs }, text || href);
}

export function condition(obj, type = "Ready") {
  const cs = (obj && obj.status && obj.status.conditions) || [];
  return cs.find((c) => c.type === type) || { status: "Unknown", reason: "", message: "" };
}

export function readyBadge(obj) {
  const c = condition(obj);
  const cls = c.status === "True" ? "ok" : c.status === "False" ? "bad" : "wait";
  const text = c.status === "True" ? "Ready" : c.reason || (c.status === "False" ? "Not ready" : "Unknown");
  return h("span", { class: `badge ${cls}`, title: c.message || "" }, text);
}

export function age(ts, now = Date.now()) {
  const t = Date.parse(ts || "");
  if (Number.isNaN(t)) return "";
  let s = Math.max(0, Math.round((now - t) / 1000));
  if (s < 120) return `${s}s`;
  const m = Math.round(s / 60);
  if (m < 120) return `${m}m`;
  const hr = Math.round(m / 60);
  if (hr < 48) return `${hr}h`;
  return `${Math.round(hr / 24)}d`;
}

export function seconds(x) {
  if (x === null || x === undefined || Number.isNaN(x)) return "";
  return x < 1 ? `${Math.round(x * 1000)} ms` : `${x.toFixed(2)} s`;
}

// A small SVG chart of the request rate with cold starts as marks.
export function sparkline(history, label) {
  const NS = "http://www.w3.org/2000/svg";
  const w = 160;
  const ht = 32;
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("viewBox", `0 0 ${w} ${ht}`);
  svg.setAttribute("class", "spark");
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", label);
  const pts = history || [];
  const max = Math.max(1, ...pts.map((p) => p.rate));
  const n = 150;
  const x = (i) => w - (pts.length - 1 - i) * (w / (n - 1));
  const line = document.createElementNS(NS, "polyline");
  line.setAttribute("points", pts.map((p, i) => `${x(i).toFixed(1)},${(ht - 2 - (p.rate / max) * (ht - 6)).toFixed(1)}`).join(" "));
  line.setAttribute("class", "rate");
  svg.append(line);
  pts.forEach((p, i) => {
    if (!p.colds) return;
    const m = document.createElementNS(NS, "circle");
    m.setAttribute("cx", x(i).toFixed(1));
    m.setAttribute("cy", "4");
    m.setAttribute("r", "3");
    m.setAttribute("class", "cold");
    svg.append(m);
  });
  return svg;
}
