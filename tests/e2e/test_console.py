"""The web console (issue 13) in real headless Chromium (tests/e2e/chromium.py:
the DevTools protocol over a pipe, loopback only) against a real knapd:
the embedded assets and their headers, sign-in with a bearer token, the
Service map with tags, live updates from kubectl, traffic edits (a bad sum is
refused and nothing is stored; 80/20 is stored and served by the router),
a restart of a Revision's pods from its panel (new pods in the page),
scale to zero and a cold start, the view role without edit controls, and the
time to interactive with 200 Services. Screenshots go to
$KNAP_TEST_ARTIFACTS (default: <build>/test-artifacts/console)."""
import concurrent.futures
import json
import os
import re
import socket
import subprocess
import threading
import time
import urllib.request

import pytest

from chromium import BINARY, Chromium
from conftest import BUILD, Knapd
from registry import teardown_knapd_pods
from test_serving import MKIMAGE, TESTAPP, apply, containerd_ok, get, import_testapp, service

pytestmark = pytest.mark.skipif(
    not BINARY, reason="!!! console browser tests SKIPPED: chromium is not installed (tools/packages/base.test) !!!")

ARTIFACTS = os.environ.get("KNAP_TEST_ARTIFACTS", os.path.join(BUILD, "test-artifacts", "console"))
API = "/apis/serving.knative.dev/v1/namespaces/default"
EDIT_TOKEN = "console-edit-token-0123456789"
VIEW_TOKEN = "console-view-token-0123456789"
AUTH_CONFIG_TOKENS = (f"{EDIT_TOKEN},dev,2001,\"devs\"\n"
                      f"{VIEW_TOKEN},viewer,2002\n")
BINDINGS = ("  api-role-bindings:\n"
            "  - edit group:devs default\n"
            "  - view user:viewer default\n")


def auth_config(workdir):
    path = os.path.join(workdir, "tokens.csv")
    with open(path, "w") as f:
        f.write(AUTH_CONFIG_TOKENS)
    os.chmod(path, 0o600)
    return f"  api-token-file: {path}\n  metrics-listen: 127.0.0.1:0\n" + BINDINGS


def artifact(name):
    os.makedirs(ARTIFACTS, exist_ok=True)
    return os.path.join(ARTIFACTS, name)


@pytest.fixture
def consoled(workdir):
    k = Knapd(workdir, extra_config=auth_config(workdir)).start()
    yield k
    k.stop()


@pytest.fixture
def browser(workdir):
    c = Chromium(workdir)
    yield c
    if c.console:
        print("page console:\n" + "\n".join(c.console[-40:]))
    c.close()


def open_console(c, k, path="/ui/"):
    """Loads the page. Chromium aborts every request in flight when an address appears on the machine (a pod's
    veth: net::ERR_NETWORK_CHANGED); the page's own API calls are tried again, but a script of the page aborted
    that way leaves it unstarted, as a user would see it before reloading. So: up to 3 loads."""
    for attempt in range(3):
        c.navigate(k.url + path)
        try:
            return c.wait("document.body.dataset.view !== 'boot'", timeout=20, what="the page to start")
        except AssertionError as e:
            if attempt == 2:
                raise
            print(f"console: the page did not start, loading it again: {e}")


def sign_in(c, k, token):
    open_console(c, k)
    # Generous: the page tries a request again when the browser got no answer (network changes on a busy host).
    c.wait("document.body.dataset.view === 'login'", timeout=60, what="the sign-in form")
    c.eval(f"document.getElementById('token').value = {json.dumps(token)};"
           "document.getElementById('login-form').requestSubmit(); true")
    c.wait("document.body.dataset.ready === '1'", timeout=60, what="the console to list the namespace")


def text(c, selector):
    return c.eval(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); return e ? e.textContent : null; }})()")


def create_service(k, name, traffic=None, image="example.com/hello:1"):
    doc = {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": {"name": name},
           "spec": {"template": {"spec": {"containers": [{"image": image}]}}}}
    if traffic:
        doc["spec"]["traffic"] = traffic
    code, body, _ = k.http("POST", f"{API}/services", json.dumps(doc))
    assert code == 201, body


def test_assets_are_embedded_with_strict_headers_and_metrics_need_a_role(consoled):
    k = consoled
    s = k.api_socket(timeout=10, client_cert=False)
    s.sendall(b"GET /ui HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    moved = b""
    while chunk := s.recv(65536):
        moved += chunk
    s.close()
    assert moved.startswith(b"HTTP/1.1 301") and b"\r\nLocation: /ui/\r\n" in moved, moved
    # A browser resumes its TLS session on its next connections (the page's scripts load in parallel).
    ctx = k.ssl_context(client_cert=False)
    first = ctx.wrap_socket(socket.create_connection(("127.0.0.1", k.api_port), timeout=10), server_hostname="127.0.0.1")
    first.sendall(b"GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert first.recv(65536).startswith(b"HTTP/1.1 200")
    again = ctx.wrap_socket(socket.create_connection(("127.0.0.1", k.api_port), timeout=10), server_hostname="127.0.0.1",
                            session=first.session)
    again.sendall(b"GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    assert again.recv(65536).startswith(b"HTTP/1.1 200")
    assert again.session_reused
    first.close()
    again.close()
    code, page, headers = k.http("GET", "/ui/", accept="text/html", client_cert=False)
    assert code == 200, page
    assert headers["Content-Type"].startswith("text/html")
    csp = headers["Content-Security-Policy"]
    for directive in ("default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"):
        assert directive in csp, csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Cache-Control"] == "no-cache" and headers["ETag"]
    assert not re.search(r"<script(?![^>]*\bsrc=)", page), "index.html must carry no inline script"
    m = re.search(r'src="/ui/([0-9a-f]{16})/app\.js"', page)
    assert m, page
    bundle = m.group(1)
    for name, ctype in (("app.js", "text/javascript"), ("style.css", "text/css"), ("api.js", "text/javascript")):
        code, body, h = k.http("GET", f"/ui/{bundle}/{name}", client_cert=False)
        assert code == 200 and h["Content-Type"].startswith(ctype), (name, code, h)
        assert "immutable" in h["Cache-Control"] and h["Content-Security-Policy"] == csp
        code, body, _ = k.http("GET", f"/ui/{bundle}/{name}", client_cert=False, headers={"If-None-Match": h["ETag"]})
        assert code == 304 and body == ""
    assert k.http("GET", "/ui/0123456789abcdef/app.js", client_cert=False)[0] == 404
    assert k.http("GET", f"/ui/{bundle}/nope.js", client_cert=False)[0] == 404
    assert k.http("POST", "/ui/", body="{}", client_cert=False)[0] == 405

    # The router's metrics, per namespace, with the API's authentication and roles.
    code, body, h = k.http("GET", "/apis/knap.dev/v1/namespaces/default/metrics", token=VIEW_TOKEN)
    assert code == 200 and h["Content-Type"].startswith("text/plain"), body
    assert k.http("GET", "/apis/knap.dev/v1/namespaces/default/metrics", client_cert=False)[0] == 401
    assert k.http("GET", "/apis/knap.dev/v1/namespaces/other/metrics", token=VIEW_TOKEN)[0] == 403


def test_view_role_sees_the_map_without_edit_controls_and_the_api_refuses_its_writes(consoled, browser):
    k, c = consoled, browser
    create_service(k, "hello")
    # A wrong token is refused at sign-in.
    open_console(c, k)
    c.wait("document.body.dataset.view === 'login'", timeout=60)
    c.eval("document.getElementById('token').value = 'wrong-token'; document.getElementById('login-form').requestSubmit(); true")
    c.wait("document.getElementById('login-error').textContent.includes('401')", what="the refusal of a bad token")

    sign_in(c, k, VIEW_TOKEN)
    assert text(c, "#role") == "view"
    c.wait("document.querySelector('[data-service=hello]')", what="the card of hello")
    c.eval("location.hash = '#/ns/default/services/hello'; true")
    c.wait("document.getElementById('view-yaml')", what="the detail of hello")
    c.wait("document.querySelector('.rev-panel[data-revision=\"hello-00001\"]')", what="the Revision panel of hello")
    edit_controls = c.eval("['edit-traffic', 'edit-yaml', 'redeploy', 'traffic-editor', 'restart-hello-00001']"
                           ".filter(id => document.getElementById(id))")
    assert edit_controls == [], edit_controls
    assert c.eval("document.querySelectorAll('.rev-panel button.restart').length") == 0
    c.eval("document.getElementById('view-yaml').click(); true")
    c.wait("document.getElementById('yaml-text') && document.getElementById('yaml-text').readOnly")
    assert c.eval("document.getElementById('yaml-save')") is None
    c.screenshot(artifact("view-role.png"))

    # The same session's writes, sent anyway from the page, are refused by the API.
    path = f"{API}/services/hello"
    status = c.eval(f"knapConsole.api.mergePatch({json.dumps(path)}, {{spec: {{traffic: [{{latestRevision: true, percent: 100, tag: 'x'}}]}}}})"
                    ".then(() => 'stored', e => e.status)")
    assert status == 403
    # A restart of the Revision's pods too (it needs the edit role).
    status = c.eval("knapConsole.api.restartRevision('default', 'hello-00001').then(() => 'restarted', e => e.status)")
    assert status == 403
    assert "traffic" not in k.get_json(path)["spec"] or not any(
        t.get("tag") == "x" for t in k.get_json(path)["spec"]["traffic"])

    # A change made with kubectl shows without a reload.
    c.eval("location.hash = '#/ns/default'; true")
    doc = json.dumps({"apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": {"name": "from-kubectl"},
                      "spec": {"template": {"spec": {"containers": [{"image": "example.com/hello:2"}]}}}})
    t0 = time.time()
    k.kubectl("apply", "-f", "-", input=doc)
    t1 = time.time()
    c.wait("document.querySelector('[data-service=\"from-kubectl\"]')", timeout=30, what="the kubectl change")
    t2 = time.time()
    print(f"console: kubectl apply started -> shown in the page after {(t2 - t0) * 1000:.0f} ms "
          f"(kubectl itself ran {(t1 - t0) * 1000:.0f} ms)")
    assert t2 - t1 < 5, "the page should follow the watch, not a reload"


def test_yaml_edit_shows_field_errors_and_redeploy_makes_a_revision(consoled, browser):
    k, c = consoled, browser
    create_service(k, "hello")
    k.wait_for(lambda: len(k.get_json(f"{API}/revisions")["items"]) == 1, what="the first Revision")
    sign_in(c, k, EDIT_TOKEN)
    c.eval("location.hash = '#/ns/default/services/hello'; true")
    c.wait("document.getElementById('edit-yaml')")

    # YAML with an invalid value: the API's field error is listed, nothing is stored.
    before = k.get_json(f"{API}/services/hello")["metadata"]["resourceVersion"]
    c.eval("document.getElementById('edit-yaml').click(); true")
    c.wait("document.getElementById('yaml-text') && document.getElementById('yaml-text').value.includes('hello')")
    c.eval("""(() => { const t = document.getElementById('yaml-text'); const o = JSON.parse(t.value);
        o.spec.template.spec.containerConcurrency = -1; t.value = JSON.stringify(o, null, 2);
        document.getElementById('yaml-save').click(); return true; })()""")
    c.wait("document.getElementById('yaml-errors').textContent.includes('containerConcurrency')",
           what="the field error of the YAML edit")
    assert k.get_json(f"{API}/services/hello")["metadata"]["resourceVersion"] == before

    # Typed as YAML (not JSON): a label is stored.
    c.eval("""(() => { const t = document.getElementById('yaml-text'); const o = JSON.parse(t.value);
        const y = ['apiVersion: serving.knative.dev/v1', 'kind: Service', 'metadata:', '  name: hello',
                   '  namespace: default', '  resourceVersion: "' + o.metadata.resourceVersion + '"',
                   '  labels:', '    team: console', 'spec:', '  template:', '    spec:', '      containers:',
                   '      - image: example.com/hello:1'];
        t.value = y.join('\\n'); document.getElementById('yaml-save').click(); return true; })()""")
    c.wait("!document.getElementById('yaml-editor')", what="the YAML editor to close after saving")
    assert k.get_json(f"{API}/services/hello")["metadata"]["labels"]["team"] == "console"

    # Redeploy: a new Revision, shown live.
    c.eval("document.getElementById('redeploy').click(); true")
    k.wait_for(lambda: len(k.get_json(f"{API}/revisions")["items"]) == 2, what="a second Revision")
    c.wait("document.querySelectorAll('.rev-panel').length === 2", what="the new Revision in the page")


def time_to_interactive(c, k, services, loads=3):
    """Loads the page `loads` times (a new document each time: the query string is ignored by knapd; the token
    stays in sessionStorage) and returns the sorted times from navigation to the first full render, in ms."""
    figures = []
    for i in range(loads):
        c.navigate(k.url + f"/ui/?load={services}-{i}#/ns/default")
        c.wait(f"location.search === '?load={services}-{i}'", what="the new document")
        c.wait("document.body.dataset.ready === '1' && window.knapConsoleReadyMs > 0",
               what=f"the console with {services} Services")
        figures.append(c.eval("window.knapConsoleReadyMs"))
        assert c.eval("document.querySelectorAll('#services article.svc').length") == services
    return sorted(figures)


def test_200_services_are_interactive_quickly(consoled, browser):
    k, c = consoled, browser
    sign_in(c, k, EDIT_TOKEN)
    empty = time_to_interactive(c, k, 0)  # the reference: the same page with nothing to list
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda i: create_service(k, f"svc-{i:03d}"), range(200)))
    k.wait_for(lambda: len(k.get_json(f"{API}/revisions")["items"]) >= 200, timeout=120, what="200 revisions")
    figures = time_to_interactive(c, k, 200)
    assert text(c, "#count") == "200 Services"
    # Interactive: a click on a card opens its detail at once.
    c.eval("document.querySelector('[data-service=\"svc-150\"] a.open').click(); true")
    c.wait("document.getElementById('edit-traffic')", timeout=10)
    print(f"console: 200 Services interactive after {figures[1]:.0f} ms (median of 3: {', '.join(f'{x:.0f}' for x in figures)} ms); "
          f"empty namespace {empty[1]:.0f} ms ({', '.join(f'{x:.0f}' for x in empty)} ms)")
    c.screenshot(artifact("200-services.png"))
    assert figures[1] < 10000, figures  # the goal is <= 1000 ms; only a gross regression fails here


# ---- real pods: traffic through the router, scale to zero, cold starts ----

@pytest.fixture
def console_serving(workdir):
    if not containerd_ok() or not os.path.exists(TESTAPP) or not os.path.exists(MKIMAGE):
        pytest.skip("!!! console real-pod test SKIPPED: needs root, a running containerd and the built test app !!!")
    tag = os.getpid() % 150 + 60
    ns = f"knap-e2e-{tag}"
    bridge = f"knape2e{tag}"
    k = Knapd(workdir, runtime="containerd", extra_config=(
        f"  containerd-namespace: {ns}\n"
        f"  bridge-name: {bridge}\n"
        f"  pod-subnet: 10.217.{tag}.0/24\n"
        + auth_config(workdir) +
        "autoscaler:\n"
        "  stable-window: 6s\n"
        "  panic-window-percentage: \"20\"\n"
        "  scale-to-zero-grace-period: 1s\n"))
    import_testapp(workdir, ns)
    k.start(timeout=60)
    yield k
    teardown_knapd_pods(k, ns, bridge)


def set_row(c, revision, percent=None, tag=None):
    """Types into the traffic editor's row of `revision` as a user would (input events)."""
    js = f"""(() => {{
      const rows = [...document.querySelectorAll('#traffic-editor .t-row')];
      const row = rows.find(r => r.querySelector('select').value === {json.dumps(revision)});
      if (!row) return 'no row';
      const set = (sel, v) => {{ const e = row.querySelector(sel); e.focus(); e.value = v;
                                 e.dispatchEvent(new Event('input', {{bubbles: true}})); }};
      {'' if percent is None else f"set('.pct-input', {json.dumps(str(percent))});"}
      {'' if tag is None else f"set('.tag-input', {json.dumps(tag)});"}
      return 'ok';
    }})()"""
    assert c.eval(js) == "ok"


def cold_starts(c):
    """The cold starts the Revision panels show, {revision: count}."""
    return c.eval("""Object.fromEntries([...document.querySelectorAll('.rev-panel')].map(p => {
        const m = /(\\d+) cold start/.exec(p.textContent); return [p.dataset.revision, m ? Number(m[1]) : -1]; }))""")


def test_split_edit_router_share_scale_to_zero_and_cold_start(console_serving, browser):
    k, c = console_serving, browser
    apply(k, service("web", template_name="web-one"))
    apply(k, service("web", template_name="web-two", traffic=[
        {"revisionName": "web-one", "percent": 50},
        {"revisionName": "web-two", "percent": 50, "tag": "two"}]))
    sign_in(c, k, EDIT_TOKEN)
    assert text(c, "#role") == "edit"

    # The map: Service -> Revisions with 50/50 and the tag as a link.
    c.wait("""(() => { const e = [...document.querySelectorAll('[data-service=web] li.edge')];
        return e.length >= 2 && e.every(x => x.querySelector('.pct').textContent === '50%'); })()""",
           what="the 50/50 map")
    href = c.wait("(() => { const a = document.querySelector('[data-service=web] a.tag-link[data-tag=two]');"
                  " return a && a.href; })()", what="the tag link")
    assert "two-web" in href, href
    assert c.eval("document.querySelector('[data-service=web] li.edge[data-revision=\"web-two\"] a.tag-link') !== null")
    c.screenshot(artifact("map.png"))

    # Edit: a bad sum shows an error (the client's and the server's dry run) and nothing is stored.
    before = k.get_json(f"{API}/services/web")
    c.eval("location.hash = '#/ns/default/services/web'; true")
    c.wait("document.getElementById('edit-traffic')")
    c.eval("document.getElementById('edit-traffic').click(); true")
    c.wait("document.getElementById('traffic-editor')")
    set_row(c, "web-one", percent=60)
    c.wait("document.getElementById('t-sum').textContent === 'sum 110%'")
    c.wait("document.getElementById('t-errors').textContent.includes('want 100')", what="the local sum error")
    c.wait("document.getElementById('t-errors').textContent.includes('Traffic targets sum to 110')",
           what="the server's field error (dry run)")
    assert c.eval("document.getElementById('t-save').disabled") is True
    set_row(c, "web-one", tag="two")
    c.wait("document.querySelector('#traffic-editor .t-row').textContent.includes('also on row')"
           " || [...document.querySelectorAll('#traffic-editor .field-error')].some(e => e.textContent.includes('also on row'))",
           what="the duplicate tag error")
    c.screenshot(artifact("traffic-error.png"))
    c.eval("document.getElementById('traffic-editor').requestSubmit(); true")
    time.sleep(1)
    after = k.get_json(f"{API}/services/web")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["spec"]["traffic"] == before["spec"]["traffic"]

    # 80/20: stored, shown, and served by the router.
    set_row(c, "web-one", percent=80, tag="")
    set_row(c, "web-two", percent=20)
    c.wait("document.getElementById('t-sum').textContent === 'sum 100%' && !document.getElementById('t-save').disabled")
    c.eval("document.getElementById('t-save').click(); true")
    c.wait("!document.getElementById('traffic-editor')", what="the editor to close after saving")
    spec = {t["revisionName"]: t["percent"] for t in k.get_json(f"{API}/services/web")["spec"]["traffic"]}
    assert spec == {"web-one": 80, "web-two": 20}, spec
    k.wait_for(lambda: {t.get("revisionName"): t["percent"] for t in
                        k.get_json(f"{API}/routes/web").get("status", {}).get("traffic", [])} ==
               {"web-one": 80, "web-two": 20}, timeout=60, what="the route at 80/20")
    c.wait("[...document.querySelectorAll('[data-service=web] li.edge')].map(e => e.querySelector('.pct').textContent)"
           ".sort().join() === '20%,80%'", what="the map at 80/20")
    counts = {"web-one": 0, "web-two": 0}
    for _ in range(200):
        code, body = get(k, "web.default.localhost")
        assert code == 200, body
        counts[json.loads(body)["revision"]] += 1
    print(f"console: router split after the 80/20 edit: {counts}")
    assert 130 <= counts["web-one"] <= 190, counts

    # Live logs of a running pod (the test app logs its start).
    c.eval("document.querySelector('.rev-panel[data-revision=\"web-one\"] details.logs').open = true; true")
    c.wait("(document.querySelector('.rev-panel[data-revision=\"web-one\"] details.logs pre') || {}).textContent"
           "?.includes('knap-testapp: starting')", timeout=30, what="the pod log in the page")

    # Restart of web-one's pods from its panel: the log view (polled every 2 s) lists other pods afterwards.
    # Traffic meanwhile, so that the autoscaler keeps web-one's pods (the restart is what replaces them).
    busy = threading.Event()

    def keep_busy():
        while not busy.is_set():
            get(k, "web.default.localhost")
            time.sleep(0.05)
    traffic = threading.Thread(target=keep_busy, daemon=True)
    traffic.start()
    pods_in_page = ("[...document.querySelectorAll('.rev-panel[data-revision=\"web-one\"] details.logs .log > p.muted')]"
                    ".map(e => e.textContent.split(' ')[0]).filter((v, i, a) => a.indexOf(v) === i).sort()")
    ctr = ["ctr", "-n", f"knap-e2e-{os.getpid() % 150 + 60}", "containers", "ls", "-q"]
    containers = lambda: sorted(x for x in subprocess.run(ctr, capture_output=True, text=True).stdout.split()
                                if x.startswith("web-one-"))
    try:
        old_pods = c.wait(f"(() => {{ const p = {pods_in_page}; return p.length ? p : null; }})()",
                          timeout=30, what="web-one's pods in the log view")
        # (The containers may include a warm pod, which has no log until it is started.)
        assert set(old_pods) <= set(containers()), (containers(), old_pods)
        c.eval("document.getElementById('restart-web-one').click(); true")
        c.wait("document.getElementById('status').textContent.match(/restarting [0-9]+ pod/)", timeout=30,
               what="the restart's answer in the page")
        new_pods = c.wait(f"""(() => {{ const p = {pods_in_page}; const old = {json.dumps(old_pods)};
            return p.length && p.every(x => !old.includes(x)) ? p : null; }})()""", timeout=90,
                          what="new pods in web-one's log view")
        k.wait_for(lambda: containers() and not set(containers()) & set(old_pods), timeout=60,
                   what="the old pod containers gone")
        assert set(new_pods) <= set(containers()), (containers(), new_pods)
    finally:
        busy.set()
        traffic.join(timeout=120)
    c.screenshot(artifact("restart.png"))

    # Idle: both Revisions show scaled to zero; one request shows a cold start.
    c.wait("document.querySelectorAll('.rev-panel.at-zero .badge.zero').length === 2", timeout=150,
           what="both Revisions at zero")
    c.screenshot(artifact("scaled-to-zero.png"))
    before_cold = cold_starts(c)
    assert get(k, "web.default.localhost")[0] == 200
    c.wait(f"""(() => {{ const b = {json.dumps(before_cold)};
        return [...document.querySelectorAll('.rev-panel')].some(p => {{
          const m = /(\\d+) cold start/.exec(p.textContent);
          return m && Number(m[1]) > (b[p.dataset.revision] ?? 0) &&
                 /(pulled|cached|warm|frozen), \\d/.test(p.querySelector('.cold').textContent); }}); }})()""",
           timeout=30, what="the cold start in the Revision panel")
    c.eval("document.querySelectorAll('details.autoscaling')[0].open = true; true")
    c.wait("document.querySelector('table.eff td.src')", what="the effective autoscaling table")
    c.screenshot(artifact("cold-start.png"))

    # Phone width: no horizontal scrolling; every control reachable with the keyboard.
    c.viewport(390, 844, mobile=True)
    c.eval("location.hash = '#/ns/default/services/web'; true")
    c.wait("document.getElementById('edit-traffic')")
    assert c.eval("document.documentElement.scrollWidth <= window.innerWidth + 1"), "horizontal overflow at 390 px"
    c.eval("document.querySelectorAll('details.autoscaling')[0].open = true; true")
    c.wait("document.querySelector('table.eff td.src')")
    outside = c.eval("[...document.querySelectorAll('#detail, .rev-panel, .actions, header.top')]"
                     ".filter(e => e.getBoundingClientRect().right > window.innerWidth + 1).map(e => e.className || e.id)")
    assert outside == [], f"cut off at 390 px: {outside}"
    c.screenshot(artifact("phone.png"))
    c.eval("document.activeElement.blur(); document.getElementById('ns').focus(); true")
    reached = []
    for _ in range(30):
        c.page("Input.dispatchKeyEvent", type="keyDown", key="Tab", code="Tab", windowsVirtualKeyCode=9)
        c.page("Input.dispatchKeyEvent", type="keyUp", key="Tab", code="Tab", windowsVirtualKeyCode=9)
        reached.append(c.eval("document.activeElement.id || document.activeElement.textContent.slice(0, 20)"))
    assert "edit-traffic" in reached and "redeploy" in reached, reached
