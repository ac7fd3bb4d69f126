// The router's metrics for one namespace (GET /apis/knap.dev/v1/namespaces/NS/metrics,
// Prometheus text), turned into per-Revision figures and a short history:
// request rate, cold starts (count, last path and duration), pods, warm pool.

// Parses the text format into [{name, labels: {k: v}, value}].
export function parsePrometheus(text) {
  const out = [];
  for (const line of text.split("\n")) {
    if (!line || line[0] === "#") continue;
    const brace = line.indexOf("{");
    let name;
    const labels = {};
    let rest;
    if (brace >= 0) {
      name = line.slice(0, brace);
      let i = brace + 1;
      while (i < line.length && line[i] !== "}") {
        const eq = line.indexOf("=", i);
        if (eq < 0 || line[eq + 1] !== '"') break;
        const key = line.slice(i, eq);
        let j = eq + 2;
        let v = "";
        while (j < line.length && line[j] !== '"') {
          if (line[j] === "\\" && j + 1 < line.length) {
            j++;
            v += line[j] === "n" ? "\n" : line[j];
          } else {
            v += line[j];
          }
          j++;
        }
        labels[key] = v;
        i = j + 1;
        if (line[i] === ",") i++;
      }
      rest = line.slice(line.indexOf("}", i) + 1);
    } else {
      const sp = line.indexOf(" ");
      name = line.slice(0, sp);
      rest = line.slice(sp);
    }
    const value = parseFloat(rest.trim().split(/\s+/)[0]);
    if (!Number.isNaN(value)) out.push({ name, labels, value });
  }
  return out;
}

const HISTORY = 150; // samples kept per revision (5 minutes at one sample per 2 s)

// Per revision ("ns/name"): the latest figures and their history.
export class RevisionMetrics {
  constructor() {
    this.prev = new Map(); // revision -> {t, requests, cold: {path: {count, sum}}}
    this.stats = new Map(); // revision -> figures shown
  }

  // Folds one scrape taken at time `t` (ms).
  update(samples, t) {
    const cur = new Map();
    const at = (rev) => {
      if (!cur.has(rev)) cur.set(rev, { requests: 0, cold: {}, desired: null, ready: null, warm: {} });
      return cur.get(rev);
    };
    for (const s of samples) {
      const rev = s.labels.revision;
      if (!rev) continue;
      const c = at(rev);
      if (s.name === "knap_router_requests_total") c.requests += s.value;
      else if (s.name === "knap_cold_start_seconds_count") (c.cold[s.labels.path] ||= { count: 0, sum: 0 }).count = s.value;
      else if (s.name === "knap_cold_start_seconds_sum") (c.cold[s.labels.path] ||= { count: 0, sum: 0 }).sum = s.value;
      else if (s.name === "knap_revision_pods") c[s.labels.state] = s.value;
      else if (s.name === "knap_warm_pool_pods") c.warm[s.labels.mode] = s.value;
    }
    for (const [rev, c] of cur) {
      const p = this.prev.get(rev);
      let st = this.stats.get(rev);
      if (!st) {
        st = { history: [], coldStarts: 0, lastCold: null, rate: 0 };
        this.stats.set(rev, st);
      }
      let rate = 0;
      let colds = 0;
      if (p) {
        const dt = (t - p.t) / 1000;
        if (dt > 0) rate = Math.max(0, c.requests - p.requests) / dt;
        for (const [path, v] of Object.entries(c.cold)) {
          const before = p.cold[path] || { count: 0, sum: 0 };
          const n = v.count - before.count;
          if (n > 0) {
            colds += n;
            st.lastCold = { path, seconds: (v.sum - before.sum) / n, at: t };
          }
        }
      } else {
        // First scrape: the totals so far; the mean as the best figure for the last one.
        let best = null;
        for (const [path, v] of Object.entries(c.cold)) {
          if (v.count > 0 && (!best || v.count > best.count)) best = { path, count: v.count, sum: v.sum };
        }
        if (best) st.lastCold = { path: best.path, seconds: best.sum / best.count, at: null };
      }
      st.coldStarts = Object.values(c.cold).reduce((a, v) => a + v.count, 0);
      st.rate = rate;
      st.desired = c.desired;
      st.ready = c.ready;
      st.warm = c.warm;
      st.history.push({ t, rate, colds });
      if (st.history.length > HISTORY) st.history.shift();
      this.prev.set(rev, { t, requests: c.requests, cold: c.cold });
    }
  }

  get(revision) {
    return this.stats.get(revision);
  }
}
