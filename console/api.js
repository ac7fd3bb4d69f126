// The console's API client: the same REST API kubectl uses, authenticated
// with a bearer token from JavaScript (never a cookie: no ambient credential,
// so other pages cannot forge requests). Writes send JSON, merge-patch or
// YAML bodies, which the API requires (a form post is refused with 415).

export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
  // Kubernetes Status causes: [{field, message, reason}].
  get causes() {
    return (this.body && this.body.details && this.body.details.causes) || [];
  }
}

// fetch(), tried again (3 times, 250 ms apart) when no answer came at all: the
// browser aborts requests when the machine's network changes (an address
// added, as when a pod's interface appears), which is not the API refusing.
// Every request the console makes may be repeated: reads, reviews, merge
// patches (the same patch twice is the same object) and PUTs that carry a
// resourceVersion (a repeat after success is a 409, never a lost update).
// An attempt that has no answer after 10 s is abandoned and tried again too.
// The exception: a POST that starts something (a restart of a Revision's
// pods) is sent once (retries = 0), so that a lost answer never restarts twice.
async function fetchRetrying(path, init, retries = 3) {
  for (let attempt = 0; ; attempt++) {
    try {
      return await fetch(path, init.signal ? init : { ...init, signal: AbortSignal.timeout(10000) });
    } catch (e) {
      if (attempt >= retries || (init.signal && init.signal.aborted)) throw e;
      await new Promise((r) => setTimeout(r, 250));
    }
  }
}

export class Api {
  constructor(token) {
    this.token = token || "";
  }

  headers(extra) {
    const h = { Accept: "application/json", ...extra };
    if (this.token) h.Authorization = "Bearer " + this.token;
    return h;
  }

  async request(method, path, body, contentType = "application/json", retries = 3) {
    const init = { method, headers: this.headers(), credentials: "omit", cache: "no-store" };
    if (body !== undefined) {
      init.headers["Content-Type"] = contentType;
      init.body = typeof body === "string" ? body : JSON.stringify(body);
    }
    const res = await fetchRetrying(path, init, retries);
    const text = await res.text();
    let json = null;
    if (text && (res.headers.get("Content-Type") || "").includes("json")) {
      try {
        json = JSON.parse(text);
      } catch (e) {
        json = null;
      }
    }
    if (!res.ok) throw new ApiError(res.status, json || { message: text.trim() || `HTTP ${res.status}` });
    return json !== null ? json : text;
  }

  get(path) {
    return this.request("GET", path);
  }
  mergePatch(path, patch) {
    return this.request("PATCH", path, patch, "application/merge-patch+json");
  }
  putYaml(path, text) {
    return this.request("PUT", path, text, "application/yaml");
  }
  // A rolling restart of a Revision's pods (RevisionRestart: pods, message); sent once.
  restartRevision(namespace, name) {
    return this.request("POST", `/apis/knap.dev/v1/namespaces/${encodeURIComponent(namespace)}/revisions/${encodeURIComponent(name)}/restart`,
      undefined, undefined, 0);
  }

  async whoami() {
    const r = await this.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", {
      apiVersion: "authentication.k8s.io/v1",
      kind: "SelfSubjectReview",
    });
    return (r.status && r.status.userInfo) || {};
  }

  // `kubectl auth can-i VERB RESOURCE -n NS` for serving.knative.dev.
  async canI(verb, resource, namespace) {
    const r = await this.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {
      apiVersion: "authorization.k8s.io/v1",
      kind: "SelfSubjectAccessReview",
      spec: { resourceAttributes: { verb, group: "serving.knative.dev", resource, namespace } },
    });
    return !!(r.status && r.status.allowed);
  }
}

// Keeps `cache` (a Map name -> object) equal to a collection, by a LIST and
// then a WATCH resumed from the last resourceVersion seen whenever the stream
// ends; a 410 (too old) lists again. A 404 (a kind this knapd does not serve)
// marks the kind absent and stops. onChange() is called after every change.
export class Follower {
  constructor(api, path, cache, onChange, onState) {
    this.api = api;
    this.path = path;
    this.cache = cache;
    this.onChange = onChange;
    this.onState = onState || (() => {});
    this.abort = new AbortController();
    this.rv = "";
    this.absent = false;
    this.stopped = false;
  }

  stop() {
    this.stopped = true;
    this.abort.abort();
  }

  async run() {
    let delay = 250;
    while (!this.stopped) {
      try {
        if (!this.rv) await this.list();
        if (this.stopped || this.absent) return;
        this.onState("live");
        await this.watch();
        delay = 250;
      } catch (e) {
        if (this.stopped) return;
        if (e instanceof ApiError && e.status === 404) {
          this.absent = true;
          this.cache.clear();
          this.onChange();
          this.onState("absent");
          return;
        }
        if (e instanceof ApiError && e.status === 410) {
          this.rv = "";
          continue;
        }
        this.onState("error", e);
        if (e instanceof ApiError && (e.status === 401 || e.status === 403)) return;
        await new Promise((r) => setTimeout(r, delay));
        delay = Math.min(delay * 2, 5000);
      }
    }
  }

  async list() {
    const list = await this.api.get(this.path);
    this.cache.clear();
    for (const o of list.items || []) this.cache.set(o.metadata.name, o);
    this.rv = (list.metadata && list.metadata.resourceVersion) || "0";
    this.onChange();
  }

  async watch() {
    const url = `${this.path}?watch=1&allowWatchBookmarks=true&timeoutSeconds=300&resourceVersion=${encodeURIComponent(this.rv)}`;
    const res = await fetch(url, {
      headers: this.api.headers(),
      credentials: "omit",
      cache: "no-store",
      signal: this.abort.signal,
    });
    if (!res.ok) {
      let body = null;
      try {
        body = await res.json();
      } catch (e) {
        body = null;
      }
      throw new ApiError(res.status, body);
    }
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buf = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += decoder.decode(value, { stream: true });
      let nl;
      let changed = false;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        if (!line) continue;
        const ev = JSON.parse(line);
        const o = ev.object || {};
        if (ev.type === "ERROR") {
          if (o.code === 410) {
            this.rv = "";
            return;
          }
          throw new ApiError(o.code || 500, o);
        }
        if (o.metadata && o.metadata.resourceVersion) this.rv = o.metadata.resourceVersion;
        if (ev.type === "BOOKMARK") continue;
        if (ev.type === "DELETED") this.cache.delete(o.metadata.name);
        else this.cache.set(o.metadata.name, o);
        changed = true;
      }
      if (changed) this.onChange();
    }
  }
}
