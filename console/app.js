// knap's web console (issue 13): the Services of a namespace as a map
// Service -> Configuration -> Revisions -> Route (and DomainMappings), live
// from watches; Revision state, effective autoscaling and metrics; traffic,
// YAML and redeploy edits and restarts of a Revision's pods, through the same
// API kubectl uses. See docs/console.md.
import { Api, ApiError, Follower } from "./api.js";
import { RevisionMetrics, parsePrometheus } from "./metrics.js";
import { age, condition, h, link, readyBadge, seconds, sparkline } from "./render.js";
import { trafficField, trafficSpec, validateTraffic } from "./traffic.js";

const SERVING = "/apis/serving.knative.dev/v1";
const KINDS = ["services", "revisions", "routes", "domainmappings"];
const REDEPLOY_ANNOTATION = "client.knative.dev/updateTimestamp";
const METRICS_EVERY_MS = 2000;

const $ = (id) => document.getElementById(id);

class Console {
  constructor() {
    this.api = new Api(sessionStorage.getItem("knap-token") || "");
    this.ns = "default";
    this.caches = Object.fromEntries(KINDS.map((k) => [k, new Map()]));
    this.followers = [];
    this.absent = new Set();
    this.listed = new Set();
    this.canEdit = false;
    this.selected = null; // service name shown in the detail pane
    this.cards = new Map(); // service name -> {sig, el}
    this.metrics = new RevisionMetrics();
    this.autoscaling = new Map(); // "rev@rv" -> items or error text
    this.openAutoscaling = new Set();
    this.openLogs = new Set(); // Revision names whose logs are shown (and polled)
    this.logs = new Map(); // Revision name -> RevisionLog or error text
    this.editor = null; // {kind: "traffic"|"yaml", service, ...}
    this.renderQueued = false;
    this.metricsTimer = null;
    this.readyMs = null;
  }

  // ---- start-up and sign-in ----

  async boot() {
    $("login-form").addEventListener("submit", (e) => {
      e.preventDefault();
      this.signIn($("token").value.trim());
    });
    $("signout").addEventListener("click", () => this.signOut());
    $("ns-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const ns = $("ns").value.trim();
      if (ns) location.hash = `#/ns/${encodeURIComponent(ns)}`;
    });
    window.addEventListener("hashchange", () => this.route());
    // Leaving the page ends its watches at once, so their connections do not
    // hold the browser's per-host connection slots the next page needs.
    window.addEventListener("pagehide", () => this.stopFollowing());
    window.addEventListener("pageshow", (e) => {
      if (e.persisted) this.route(true);
    });
    try {
      this.user = await this.api.whoami();
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) return this.showLogin(this.api.token ? "the saved token was refused" : "");
      return this.showLogin(`cannot reach the API: ${e.message}`);
    }
    this.route(true);
  }

  showLogin(message) {
    this.stopFollowing();
    document.body.dataset.view = "login";
    $("login-error").textContent = message || "";
    $("token").focus();
  }

  async signIn(token) {
    const api = new Api(token);
    try {
      this.user = await api.whoami();
    } catch (e) {
      $("login-error").textContent =
        e instanceof ApiError && e.status === 401 ? "the API refused this token (401 Unauthorized)" : e.message;
      return;
    }
    this.api = api;
    sessionStorage.setItem("knap-token", token);
    $("token").value = "";
    this.route(true);
  }

  signOut() {
    sessionStorage.removeItem("knap-token");
    this.api = new Api("");
    this.showLogin("signed out");
  }

  // #/ns/NS[/services/NAME]
  async route(force) {
    const m = /^#\/ns\/([^/]+)(?:\/services\/([^/]+))?$/.exec(location.hash);
    const ns = m ? decodeURIComponent(m[1]) : "default";
    const selected = m && m[2] ? decodeURIComponent(m[2]) : null;
    if (force || ns !== this.ns || !this.followers.length) {
      this.ns = ns;
      await this.follow();
    }
    if (selected !== this.selected) {
      this.selected = selected;
      this.editor = null;
      $("detail-edit").replaceChildren();
      this.openAutoscaling.clear();
      this.openLogs.clear();
    }
    document.body.dataset.view = this.selected ? "detail" : "list";
    this.schedule();
    if (this.selected) $("detail-title") && $("detail-title").focus();
  }

  stopFollowing() {
    for (const f of this.followers) f.stop();
    this.followers = [];
    clearInterval(this.metricsTimer);
    this.metricsTimer = null;
  }

  async follow() {
    this.stopFollowing();
    $("ns").value = this.ns;
    $("user").textContent = this.user.username || "";
    for (const c of Object.values(this.caches)) c.clear();
    this.cards.clear();
    $("services").replaceChildren();
    this.absent.clear();
    this.listed.clear();
    // Edit controls are drawn only once the API said the caller may patch Services.
    this.canEdit = false;
    this.reviewed = false;
    document.body.dataset.role = "view";
    $("role").textContent = "view";
    const ns = this.ns;
    this.api.canI("patch", "services", ns).then((yes) => {
      if (this.ns !== ns) return;
      this.reviewed = true;
      this.schedule();
      if (!yes) return;
      this.canEdit = true;
      document.body.dataset.role = "edit";
      $("role").textContent = "edit";
      this.schedule();
    }, () => {
      this.reviewed = true;
      this.schedule();
    });
    for (const kind of KINDS) {
      const f = new Follower(
        this.api,
        `${SERVING}/namespaces/${encodeURIComponent(this.ns)}/${kind}`,
        this.caches[kind],
        () => {
          this.listed.add(kind);
          this.schedule();
        },
        (state, err) => this.followState(kind, state, err),
      );
      this.followers.push(f);
      f.run();
    }
    this.pollMetrics();
    this.metricsTimer = setInterval(() => {
      this.pollMetrics();
      for (const name of this.openLogs) this.loadLogs(name);
    }, METRICS_EVERY_MS);
  }

  followState(kind, state, err) {
    if (state === "absent") {
      this.absent.add(kind);
      this.listed.add(kind);
      this.schedule();
    }
    if (state === "error") {
      if (err instanceof ApiError && err.status === 401) return this.showLogin("the API refused the token");
      // Draw without this kind rather than not at all; it fills in when a retry lists it.
      this.listed.add(kind);
      this.schedule();
      this.status(`${kind}: ${err.message} (retrying)`, true);
    }
    if (state === "live") this.status("");
  }

  async pollMetrics() {
    try {
      const text = await this.api.get(`/apis/knap.dev/v1/namespaces/${encodeURIComponent(this.ns)}/metrics`);
      this.metrics.update(parsePrometheus(String(text)), Date.now());
      this.metricsStamp = Date.now();
      if (this.selected) this.schedule();
    } catch (e) {
      // Metrics are optional (a knapd without a router answers 404).
    }
  }

  status(text, error) {
    const el = $("status");
    el.textContent = text;
    el.className = error ? "error" : "";
  }

  // ---- rendering ----

  schedule() {
    if (this.renderQueued) return;
    this.renderQueued = true;
    requestAnimationFrame(() => {
      this.renderQueued = false;
      this.render();
    });
  }

  // The Service's Revisions, newest first, from an index rebuilt once per render.
  revisionsOf(svc) {
    if (!this.revIndex) {
      this.revIndex = new Map();
      for (const r of this.caches.revisions.values()) {
        const owner = (r.metadata.labels || {})["serving.knative.dev/service"];
        if (!owner) continue;
        if (!this.revIndex.has(owner)) this.revIndex.set(owner, []);
        this.revIndex.get(owner).push(r);
      }
      for (const list of this.revIndex.values())
        list.sort((a, b) => (a.metadata.creationTimestamp < b.metadata.creationTimestamp ? 1 : -1));
    }
    return this.revIndex.get(svc) || [];
  }

  mappingsOf(svc) {
    const out = [];
    for (const d of this.caches.domainmappings.values()) {
      const ref = (d.spec && d.spec.ref) || {};
      if (ref.name === svc && (ref.kind || "Service") === "Service") out.push(d);
    }
    return out;
  }

  // The traffic in force: the Route's status, else the Service's.
  trafficOf(svc) {
    const route = this.caches.routes.get(svc.metadata.name);
    const t = (route && route.status && route.status.traffic) || (svc.status && svc.status.traffic) || [];
    return t;
  }

  render() {
    this.revIndex = null;
    // The first time, draw once everything is listed (not once per kind).
    if (this.readyMs === null && !KINDS.every((k) => this.listed.has(k))) return;
    const names = [...this.caches.services.keys()].sort();
    const list = $("services");
    const seen = new Set();
    let prev = null;
    for (const name of names) {
      seen.add(name);
      const svc = this.caches.services.get(name);
      const revs = this.revisionsOf(name);
      const route = this.caches.routes.get(name);
      const maps = this.mappingsOf(name);
      const sig = [svc, route, ...revs, ...maps].map((o) => (o ? o.metadata.resourceVersion : "-")).join(",") +
        (this.selected === name ? "*" : "");
      let card = this.cards.get(name);
      if (!card || card.sig !== sig) {
        const el = this.serviceCard(svc, revs, route, maps);
        if (card) card.el.replaceWith(el);
        card = { sig, el };
        this.cards.set(name, card);
      }
      const want = prev ? prev.nextSibling : list.firstChild;
      if (want !== card.el) list.insertBefore(card.el, want);
      prev = card.el;
    }
    for (const [name, card] of this.cards) {
      if (!seen.has(name)) {
        card.el.remove();
        this.cards.delete(name);
      }
    }
    $("empty").hidden = names.length > 0 || !this.listed.has("services");
    $("count").textContent = `${names.length} Service${names.length === 1 ? "" : "s"}`;
    this.renderDetail();
    if (this.readyMs === null && KINDS.every((k) => this.listed.has(k)) && this.reviewed) {
      this.readyMs = performance.now();
      document.body.dataset.ready = "1";
      window.knapConsoleReadyMs = this.readyMs;
    }
  }

  serviceCard(svc, revs, route, maps) {
    const name = svc.metadata.name;
    const traffic = this.trafficOf(svc);
    const byRev = new Map(revs.map((r) => [r.metadata.name, r]));
    const routed = new Set();
    const edges = traffic.map((t) => {
      const revName = t.revisionName || (svc.status && svc.status.latestReadyRevisionName) || "";
      routed.add(revName);
      return this.edge(t, revName, byRev.get(revName));
    });
    const idle = revs.filter((r) => !routed.has(r.metadata.name)).slice(0, 3);
    const st = svc.status || {};
    return h(
      "article",
      { class: `svc${this.selected === name ? " selected" : ""}`, dataset: { service: name } },
      h("header", {},
        h("h2", {}, h("a", { href: `#/ns/${encodeURIComponent(this.ns)}/services/${encodeURIComponent(name)}`, class: "open" }, name)),
        readyBadge(svc),
        link(st.url, null, { class: "svc-url" })),
      h("div", { class: "map" },
        h("div", { class: "node cfg", title: "Configuration" },
          h("span", { class: "kind" }, "Configuration "), name,
          st.latestCreatedRevisionName ? h("span", { class: "muted" }, ` latest ${st.latestCreatedRevisionName}`) : null),
        h("ul", { class: "edges", "aria-label": `traffic of ${name}` },
          edges,
          idle.map((r) => this.edge({ percent: 0 }, r.metadata.name, r, true))),
        h("div", { class: "node route", title: "Route" },
          h("span", { class: "kind" }, "Route "), route ? route.metadata.name : name, " ",
          route ? readyBadge(route) : h("span", { class: "muted" }, "(not yet)")),
        maps.length
          ? h("div", { class: "node dm", title: "DomainMappings" },
            h("span", { class: "kind" }, "DomainMapping "),
            maps.map((d) => link((d.status && d.status.url) || `http://${d.metadata.name}`, d.metadata.name, { class: "dm-link" })))
          : null));
  }

  edge(t, revName, rev, idle) {
    const pct = Number(t.percent || 0);
    const bar = h("span", { class: "bar" }, h("span", { class: "fill" }));
    bar.firstChild.style.width = `${Math.max(0, Math.min(100, pct))}%`;
    const st = (rev && rev.status) || {};
    const zero = rev && st.actualReplicas === 0;
    return h("li", { class: `edge${idle ? " idle" : ""}`, dataset: { revision: revName } },
      h("span", { class: "pct" }, `${pct}%`),
      bar,
      h("span", { class: "rev" }, revName || "(latest)", t.latestRevision ? h("span", { class: "muted" }, " latest") : null),
      rev ? readyBadge(rev) : null,
      zero ? h("span", { class: "badge zero" }, "at zero") : rev && st.actualReplicas !== undefined
        ? h("span", { class: "pods" }, `${st.actualReplicas}/${st.desiredReplicas ?? "?"} pods`) : null,
      t.tag ? h("span", { class: "tag" }, "tag ", link(t.url, t.tag, { class: "tag-link", dataset: { tag: t.tag } })) : null);
  }

  renderDetail() {
    const pane = $("detail");
    if (!this.selected) {
      pane.hidden = true;
      return;
    }
    pane.hidden = false;
    const svc = this.caches.services.get(this.selected);
    const head = $("detail-head");
    const body = $("detail-body");
    if (!svc) {
      head.replaceChildren(h("h2", { id: "detail-title", tabindex: "-1" }, this.selected),
        h("p", { class: "muted" }, this.listed.has("services") ? "no such Service (deleted?)" : "loading…"));
      body.replaceChildren();
      return;
    }
    const name = svc.metadata.name;
    const ready = condition(svc);
    head.replaceChildren(...[
      h("p", {}, h("a", { href: `#/ns/${encodeURIComponent(this.ns)}`, class: "back" }, "← all Services")),
      h("h2", { id: "detail-title", tabindex: "-1" }, name, " ", readyBadge(svc)),
      ready.status !== "True" && ready.message ? h("p", { class: "muted" }, ready.message) : null,
      h("p", {}, link(svc.status && svc.status.url, null, { class: "svc-url" })),
      this.canEdit
        ? h("div", { class: "actions", role: "toolbar", "aria-label": "Service actions" },
          h("button", { type: "button", id: "edit-traffic", onclick: () => this.openTrafficEditor(name) }, "Edit traffic"),
          h("button", { type: "button", id: "edit-yaml", onclick: () => this.openYamlEditor(name) }, "Edit YAML"),
          h("button", { type: "button", id: "redeploy", onclick: () => this.redeploy(name) }, "Redeploy"))
        : h("div", { class: "actions" },
          h("button", { type: "button", id: "view-yaml", onclick: () => this.openYamlEditor(name, true) }, "View YAML")),
    ].filter(Boolean));
    const revs = this.revisionsOf(name);
    const traffic = this.trafficOf(svc);
    body.replaceChildren(
      h("h3", {}, "Revisions"),
      revs.length ? h("div", { class: "revs" }, revs.map((r) => this.revisionPanel(r, traffic))) : h("p", { class: "muted" }, "none yet"));
  }

  revisionPanel(rev, traffic) {
    const name = rev.metadata.name;
    const st = rev.status || {};
    const key = `${this.ns}/${name}`;
    const m = this.metrics.get(key);
    const pct = traffic.filter((t) => t.revisionName === name).reduce((a, t) => a + Number(t.percent || 0), 0);
    const tags = traffic.filter((t) => t.revisionName === name && t.tag);
    const ready = condition(rev);
    const digest = ((st.containerStatuses || [])[0] || {}).imageDigest || "";
    const zero = st.actualReplicas === 0;
    const warm = m && m.warm ? Object.entries(m.warm).filter(([, n]) => n > 0) : [];
    const rows = [
      ["Ready", h("span", {}, readyBadge(rev), ready.reason ? ` ${ready.reason}` : "", ready.message ? h("span", { class: "muted" }, ` ${ready.message}`) : "")],
      ["Age", age(rev.metadata.creationTimestamp)],
      ["Traffic", `${pct}%`, tags.length ? [" ", tags.map((t) => link(t.url, t.tag, { class: "tag-link" }))] : null],
      ["Image", h("code", { class: "digest" }, digest || "(not resolved yet)")],
      ["Pods", h("span", { class: "pods" }, `${st.actualReplicas ?? "?"} ready / ${st.desiredReplicas ?? "?"} desired`),
        zero ? h("span", { class: "badge zero" }, "scaled to zero") : null],
      ["Warm pool", warm.length ? warm.map(([mode, n]) => `${n} ${mode}`).join(", ") : "none"],
      ["Last cold start", h("span", { class: "cold" }, m && m.lastCold
        ? `${m.lastCold.path}, ${seconds(m.lastCold.seconds)}${m.lastCold.at ? ` (${age(new Date(m.lastCold.at).toISOString())} ago)` : " (mean so far)"}`
        : "none seen")],
      ["Requests", m ? h("span", {}, `${m.rate.toFixed(1)}/s, ${m.coldStarts} cold start${m.coldStarts === 1 ? "" : "s"} `, sparkline(m.history, `request rate of ${name}`)) : "no metrics yet"],
    ];
    const auto = h("details", { class: "autoscaling", open: this.openAutoscaling.has(name) },
      h("summary", {}, "Effective autoscaling"),
      this.autoscalingTable(rev));
    auto.addEventListener("toggle", () => {
      if (auto.open) this.openAutoscaling.add(name);
      else this.openAutoscaling.delete(name);
      if (auto.open) this.loadAutoscaling(rev);
    });
    const logs = h("details", { class: "logs", open: this.openLogs.has(name) },
      h("summary", {}, "Logs"),
      this.logView(name));
    logs.addEventListener("toggle", () => {
      if (logs.open) {
        this.openLogs.add(name);
        this.loadLogs(name);
      } else {
        this.openLogs.delete(name);
      }
    });
    // Restart (edit role): new pods replace the running ones, each once a new one is ready.
    const actions = this.canEdit
      ? h("div", { class: "actions", role: "toolbar", "aria-label": `Revision ${name} actions` },
        h("button", { type: "button", class: "restart", id: `restart-${name}`, onclick: () => this.restartRevision(name) },
          "Restart pods"))
      : null;
    return h("section", { class: `rev-panel${zero ? " at-zero" : ""}`, dataset: { revision: name } },
      h("h4", {}, name),
      h("dl", {}, rows.map(([k, ...v]) => [h("dt", {}, k), h("dd", {}, ...v)])),
      actions, auto, logs);
  }

  logView(name) {
    const got = this.logs.get(name);
    if (got === undefined) return h("p", { class: "muted" }, "loading…");
    if (typeof got === "string") return h("p", { class: "error" }, got);
    if (!got.pods || !got.pods.length) return h("p", { class: "muted" }, "no pods (logs exist only while pods run)");
    return h("div", { class: "log-pods" }, got.pods.map((p) => p.streams.map((st) => h("div", { class: "log" },
      h("p", { class: "muted" }, `${p.name} ${st.stream}${st.truncated ? " (last 64 KiB)" : ""}`),
      st.error ? h("p", { class: "error" }, st.error)
        : h("div", { class: "logbox", tabindex: "0", "aria-label": `${p.name} ${st.stream}` }, h("pre", {}, st.text || "(empty)"))))));
  }

  async loadLogs(name) {
    try {
      const r = await this.api.get(`/apis/knap.dev/v1/namespaces/${encodeURIComponent(this.ns)}/revisions/${encodeURIComponent(name)}/log`);
      this.logs.set(name, r);
    } catch (e) {
      this.logs.set(name, `cannot read the logs: ${e.message}`);
    }
    this.schedule();
  }

  autoscalingTable(rev) {
    const key = `${rev.metadata.name}@${rev.metadata.resourceVersion}`;
    const got = this.autoscaling.get(key);
    if (got === undefined) {
      if (this.openAutoscaling.has(rev.metadata.name)) this.loadAutoscaling(rev);
      return h("p", { class: "muted" }, "loading…");
    }
    if (typeof got === "string") return h("p", { class: "error" }, got);
    return h("table", { class: "eff" },
      h("thead", {}, h("tr", {}, h("th", {}, "setting"), h("th", {}, "value"), h("th", {}, "source"))),
      h("tbody", {}, got.map((e) => h("tr", {}, h("td", {}, e.key), h("td", {}, e.value), h("td", { class: `src ${e.source}` }, e.source)))));
  }

  async loadAutoscaling(rev) {
    const key = `${rev.metadata.name}@${rev.metadata.resourceVersion}`;
    if (this.autoscaling.has(key)) return;
    this.autoscaling.set(key, "loading");
    try {
      const r = await this.api.get(`/apis/knap.dev/v1/namespaces/${encodeURIComponent(this.ns)}/revisions/${encodeURIComponent(rev.metadata.name)}/autoscaling`);
      this.autoscaling.set(key, r.items || []);
    } catch (e) {
      this.autoscaling.set(key, `cannot read the effective settings: ${e.message}`);
    }
    this.schedule();
  }

  // ---- edits (shown only to the edit role; the API refuses the others anyway) ----

  servicePath(name) {
    return `${SERVING}/namespaces/${encodeURIComponent(this.ns)}/services/${encodeURIComponent(name)}`;
  }

  openTrafficEditor(name) {
    const svc = this.caches.services.get(name);
    if (!svc) return;
    const spec = (svc.spec && svc.spec.traffic) || [{ latestRevision: true, percent: 100 }];
    const rows = spec.map((t) => ({
      revisionName: t.revisionName || "",
      latestRevision: !t.revisionName,
      percent: String(t.percent ?? 0),
      tag: t.tag || "",
    }));
    this.editor = { kind: "traffic", service: name, rows, serverErrors: [], seq: 0 };
    this.drawTrafficEditor(true);
  }

  drawTrafficEditor(focus) {
    const ed = this.editor;
    const revNames = this.revisionsOf(ed.service).map((r) => r.metadata.name);
    const check = validateTraffic(ed.rows, revNames);
    const errorsAt = (row, field, list) => list.filter((e) => e.row === row && e.field === field);
    const fieldErrors = (row, field, id) => {
      const all = [...errorsAt(row, field, check.errors), ...errorsAt(row, field, ed.serverErrors).map((e) => ({ ...e, server: true }))];
      return h("span", { class: "field-error", id, role: "alert" },
        all.map((e) => h("span", { class: e.server ? "server" : "local" }, e.message)));
    };
    const rowEls = ed.rows.map((r, i) => {
      const sel = h("select", { id: `t-rev-${i}`, "aria-label": `row ${i + 1} revision`, "aria-describedby": `t-rev-err-${i}`,
        onchange: (e) => { const v = e.target.value; r.latestRevision = v === ""; r.revisionName = v; this.trafficChanged(); } },
      h("option", { value: "", selected: r.latestRevision }, "latest ready Revision"),
      revNames.map((n) => h("option", { value: n, selected: !r.latestRevision && r.revisionName === n }, n)),
      !r.latestRevision && r.revisionName && !revNames.includes(r.revisionName)
        ? h("option", { value: r.revisionName, selected: true }, `${r.revisionName} (missing)`) : null);
      const pct = h("input", { id: `t-pct-${i}`, class: "pct-input", type: "text", inputmode: "numeric", value: r.percent,
        "aria-label": `row ${i + 1} percent`, "aria-describedby": `t-pct-err-${i}`,
        "aria-invalid": errorsAt(i, "percent", check.errors).length > 0 ? "true" : null,
        oninput: (e) => { r.percent = e.target.value; this.trafficChanged(); } });
      const tag = h("input", { id: `t-tag-${i}`, class: "tag-input", type: "text", value: r.tag, placeholder: "tag",
        "aria-label": `row ${i + 1} tag`, "aria-describedby": `t-tag-err-${i}`,
        "aria-invalid": errorsAt(i, "tag", check.errors).length > 0 ? "true" : null,
        oninput: (e) => { r.tag = e.target.value; this.trafficChanged(); } });
      return h("div", { class: "t-row", dataset: { row: i } },
        h("div", { class: "field" }, sel, fieldErrors(i, "revisionName", `t-rev-err-${i}`)),
        h("div", { class: "field" }, pct, h("span", {}, "%"), fieldErrors(i, "percent", `t-pct-err-${i}`)),
        h("div", { class: "field" }, tag, fieldErrors(i, "tag", `t-tag-err-${i}`)),
        h("button", { type: "button", class: "remove", "aria-label": `remove row ${i + 1}`,
          onclick: () => { ed.rows.splice(i, 1); this.trafficChanged(true); } }, "✕"));
    });
    const hasErrors = check.errors.length > 0;
    const form = h("form", { id: "traffic-editor", class: "editor", "aria-label": "traffic split",
      onsubmit: (e) => { e.preventDefault(); this.saveTraffic(); } },
    h("h3", {}, "Traffic split"),
    rowEls,
    h("div", { class: "t-foot" },
      h("button", { type: "button", id: "t-add", onclick: () => { ed.rows.push({ revisionName: revNames[0] || "", latestRevision: !revNames.length, percent: "0", tag: "" }); this.trafficChanged(true); } }, "Add target"),
      h("span", { id: "t-sum", class: check.sum === 100 ? "ok" : "bad" }, `sum ${check.sum}%`)),
    fieldErrors(-1, "", "t-errors"),
    h("div", { class: "actions" },
      h("button", { type: "submit", id: "t-save", disabled: hasErrors || ed.saving }, ed.saving ? "Saving…" : "Save"),
      h("button", { type: "button", id: "t-cancel", onclick: () => this.closeEditor() }, "Cancel")),
    h("p", { id: "t-result", role: "status" }, ed.result || ""));
    const box = $("detail-edit");
    const active = document.activeElement && document.activeElement.id;
    const caret = active && document.activeElement.selectionStart;
    box.replaceChildren(form);
    if (focus) (form.querySelector("input,select") || form).focus();
    else if (active && $(active)) {
      $(active).focus();
      if (caret !== undefined && caret !== null && $(active).setSelectionRange) $(active).setSelectionRange(caret, caret);
    }
  }

  // Every edit re-validates locally at once and asks the server (a dry run:
  // nothing is stored) shortly after, whose field errors show at the field.
  trafficChanged() {
    const ed = this.editor;
    ed.serverErrors = [];
    ed.result = "";
    this.drawTrafficEditor(false);
    clearTimeout(ed.timer);
    const seq = ++ed.seq;
    ed.timer = setTimeout(() => this.dryRunTraffic(seq), 300);
  }

  async dryRunTraffic(seq) {
    const ed = this.editor;
    if (!ed || ed.kind !== "traffic" || seq !== ed.seq) return;
    const errs = await this.patchTraffic(ed, true);
    if (this.editor !== ed || seq !== ed.seq) return;
    ed.serverErrors = errs;
    this.drawTrafficEditor(false);
  }

  // PATCH spec.traffic; returns the server's errors as editor fields ([] = accepted).
  async patchTraffic(ed, dryRun) {
    const spec = trafficSpec(ed.rows.map((r) => ({ ...r, percent: /^\s*\d+\s*$/.test(String(r.percent)) ? r.percent : "0" })));
    try {
      await this.api.mergePatch(this.servicePath(ed.service) + (dryRun ? "?dryRun=All" : "") , { spec: { traffic: spec } });
      return [];
    } catch (e) {
      if (!(e instanceof ApiError)) return [{ row: -1, field: "", message: e.message }];
      const causes = e.causes;
      if (!causes.length) return [{ row: -1, field: "", message: e.message }];
      return causes.map((c) => {
        const at = trafficField(c.field) || { row: -1, field: "" };
        return { ...at, message: `server: ${c.message}${at.row === -1 && c.field ? ` (${c.field})` : ""}` };
      });
    }
  }

  async saveTraffic() {
    const ed = this.editor;
    const revNames = this.revisionsOf(ed.service).map((r) => r.metadata.name);
    if (validateTraffic(ed.rows, revNames).errors.length) return;
    ed.saving = true;
    this.drawTrafficEditor(false);
    const errs = await this.patchTraffic(ed, false);
    ed.saving = false;
    if (this.editor !== ed) return;
    ed.serverErrors = errs;
    ed.result = errs.length ? "not saved" : "saved";
    if (!errs.length) {
      this.closeEditor();
      this.status(`traffic of ${ed.service} saved`);
      return;
    }
    this.drawTrafficEditor(false);
  }

  closeEditor() {
    this.editor = null;
    $("detail-edit").replaceChildren();
    const t = $("detail-title");
    if (t) t.focus();
  }

  async openYamlEditor(name, readOnly) {
    let obj;
    try {
      obj = await this.api.get(this.servicePath(name));
    } catch (e) {
      this.status(`cannot read ${name}: ${e.message}`, true);
      return;
    }
    const shown = JSON.parse(JSON.stringify(obj));
    if (shown.metadata) delete shown.metadata.managedFields;
    delete shown.status;
    const area = h("textarea", { id: "yaml-text", spellcheck: "false", rows: 24, "aria-label": `${name} as YAML (JSON is YAML)`, readonly: readOnly });
    area.value = JSON.stringify(shown, null, 2);
    const errors = h("div", { id: "yaml-errors", class: "field-error", role: "alert" });
    this.editor = { kind: "yaml", service: name };
    const form = h("form", { id: "yaml-editor", class: "editor",
      onsubmit: async (e) => {
        e.preventDefault();
        if (readOnly) return;
        errors.replaceChildren();
        try {
          await this.api.putYaml(this.servicePath(name), area.value);
          this.closeEditor();
          this.status(`${name} saved`);
        } catch (err) {
          const causes = err instanceof ApiError ? err.causes : [];
          errors.replaceChildren(h("p", {}, err.message), h("ul", {}, causes.map((c) => h("li", {}, h("code", {}, c.field || ""), " ", c.message))));
        }
      } },
    h("h3", {}, readOnly ? "YAML" : "Edit YAML"),
    h("p", { class: "muted" }, "Shown as JSON, which is YAML; YAML may be typed too. Saving replaces the Service (PUT) and fails with a conflict if it changed meanwhile."),
    area, errors,
    h("div", { class: "actions" },
      readOnly ? null : h("button", { type: "submit", id: "yaml-save" }, "Save"),
      h("button", { type: "button", onclick: () => this.closeEditor() }, readOnly ? "Close" : "Cancel")));
    $("detail-edit").replaceChildren(form);
    area.focus();
  }

  async restartRevision(name) {
    try {
      const r = await this.api.restartRevision(this.ns, name);
      this.status(`${name}: ${r.message || "restarting"}`);
    } catch (e) {
      this.status(`restart of ${name} failed: ${e.message}`, true);
    }
  }

  async redeploy(name) {
    try {
      await this.api.mergePatch(this.servicePath(name), {
        spec: { template: { metadata: { annotations: { [REDEPLOY_ANNOTATION]: new Date().toISOString() } } } },
      });
      this.status(`${name}: redeploying (a new Revision)`);
    } catch (e) {
      this.status(`redeploy of ${name} failed: ${e.message}`, true);
    }
  }
}

const app = new Console();
window.knapConsole = app;
app.boot();
