// Drives knapd with @kubernetes/client-node, for tests/e2e/test_clients.py.
// Usage: node client.mjs KUBECONFIG PREFIX
// Runs CRUD, a watch, an informer that follows a relabel, limit/continue
// paging and a patch storm against a busy Service, then prints one JSON
// object with what it saw; the Python test judges it. Exits 1 on an exception.
import * as k8s from '@kubernetes/client-node';

const [kubeconfig, prefix] = process.argv.slice(2);
const kc = new k8s.KubeConfig();
kc.loadFromFile(kubeconfig);
// client-node 1.x refuses a plain http:// server unless told that TLS is not
// verified; knapd's loopback API is plain http until it serves TLS (then the
// kubeconfig's CA is used as it is).
const current = kc.getCurrentCluster();
if (current && current.server.startsWith('http://')) {
  kc.clusters = kc.clusters.map((c) => (c.name === current.name ? { ...c, skipTLSVerify: true } : c));
}
const api = kc.makeApiClient(k8s.CustomObjectsApi);
const G = { group: 'serving.knative.dev', version: 'v1', namespace: 'default', plural: 'services' };
const PATH = '/apis/serving.knative.dev/v1/namespaces/default/services';
const merge = k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const out = {};

function service(name, labels = {}) {
  return {
    apiVersion: 'serving.knative.dev/v1', kind: 'Service', metadata: { name, labels },
    spec: { template: { spec: { containers: [{ image: 'ghcr.io/knative/helloworld-go:latest' }] } } },
  };
}

async function until(pred, ms, what) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (pred()) return;
    await sleep(50);
  }
  throw new Error('timed out waiting for ' + what);
}

function codeOf(e) {
  return e && (e.code ?? e.statusCode ?? (e.response && e.response.statusCode));
}

async function crud() {
  const name = prefix + '-crud';
  const created = await api.createNamespacedCustomObject({ ...G, body: service(name, { app: 'crud' }) });
  const got = await api.getNamespacedCustomObject({ ...G, name });
  const patched = await api.patchNamespacedCustomObject(
    { ...G, name, body: { metadata: { labels: { patched: 'yes' } } } }, merge);
  got.metadata.annotations = { ...(got.metadata.annotations || {}), replaced: 'yes' };
  delete got.metadata.resourceVersion;
  const replaced = await api.replaceNamespacedCustomObject({ ...G, name, body: patched.metadata.resourceVersion ? { ...got, metadata: { ...got.metadata, resourceVersion: patched.metadata.resourceVersion } } : got });
  const listed = await api.listNamespacedCustomObject({ ...G, labelSelector: 'app=crud' });
  await api.deleteNamespacedCustomObject({ ...G, name });
  let afterDelete = 200;
  try {
    await api.getNamespacedCustomObject({ ...G, name });
  } catch (e) {
    afterDelete = codeOf(e);
  }
  out.crud = {
    created: created.metadata.name, uid: created.metadata.uid, got: got.metadata.name,
    patched: patched.metadata.labels.patched, replaced: replaced.metadata.annotations.replaced,
    listed: listed.items.map((i) => i.metadata.name), afterDelete,
  };
}

async function watch() {
  const name = prefix + '-watch';
  const seen = [];
  const w = new k8s.Watch(kc);
  const ctl = await w.watch(PATH, { labelSelector: 'app=watch' }, (type, obj) => {
    seen.push(type + ' ' + obj.metadata.name);
  }, () => {});
  await sleep(300);
  await api.createNamespacedCustomObject({ ...G, body: service(name, { app: 'watch' }) });
  await api.patchNamespacedCustomObject({ ...G, name, body: { metadata: { annotations: { n: '1' } } } }, merge);
  await api.deleteNamespacedCustomObject({ ...G, name });
  await until(() => seen.some((s) => s.startsWith('DELETED')), 10000, 'DELETED on the watch');
  ctl.abort();
  out.watch = seen;
}

async function informer() {
  const name = prefix + '-inf';
  const events = [];
  const inf = k8s.makeInformer(kc, PATH, () => api.listNamespacedCustomObject({ ...G, labelSelector: 'tier=in' }),
    'tier=in');
  for (const verb of ['add', 'update', 'delete']) inf.on(verb, (o) => events.push(verb + ' ' + o.metadata.name));
  inf.on('error', () => {});
  await inf.start();
  const has = () => inf.list().some((o) => o.metadata.name === name);
  await api.createNamespacedCustomObject({ ...G, body: service(name, { tier: 'in' }) });
  await until(has, 10000, 'the informer to add the object');
  await api.patchNamespacedCustomObject({ ...G, name, body: { metadata: { labels: { tier: 'out' } } } }, merge);
  await until(() => !has(), 10000, 'the informer to drop the relabelled object');
  const droppedAfterRelabel = !has();
  await api.patchNamespacedCustomObject({ ...G, name, body: { metadata: { labels: { tier: 'in' } } } }, merge);
  await until(has, 10000, 'the informer to add the object again');
  await inf.stop();
  await api.deleteNamespacedCustomObject({ ...G, name });
  out.informer = { events, droppedAfterRelabel };
}

async function paging() {
  for (let i = 0; i < 5; i++) {
    await api.createNamespacedCustomObject({ ...G, body: service(`${prefix}-page${i}`, { paged: prefix }) });
  }
  const pages = [];
  let token;
  const rvs = new Set();
  do {
    const page = await api.listNamespacedCustomObject({ ...G, labelSelector: 'paged=' + prefix, limit: 2, _continue: token });
    pages.push(page.items.map((i) => i.metadata.name));
    rvs.add(page.metadata.resourceVersion);
    token = page.metadata.continue;
  } while (token && pages.length < 10);
  out.paging = { pages, resourceVersions: [...rvs] };
}

async function patchStorm() {
  const name = prefix + '-busy';
  await api.createNamespacedCustomObject({ ...G, body: service(name) });
  const codes = {};
  let n = 0;
  const worker = async (w) => {
    for (let i = 0; i < 20; i++) {
      // Labels and a template annotation: each change makes the controller
      // write the Service's status again, racing the next patch.
      const body = i % 4 === 0
        ? { spec: { template: { metadata: { annotations: { storm: `${w}-${i}` } } } } }
        : { metadata: { labels: { ['w' + w]: String(i) } } };
      let code = 200;
      try {
        await api.patchNamespacedCustomObject({ ...G, name, body }, merge);
      } catch (e) {
        code = codeOf(e) || 'error:' + e.message;
      }
      codes[code] = (codes[code] || 0) + 1;
      n++;
    }
  };
  await Promise.all([0, 1, 2, 3].map(worker));
  const final = await api.getNamespacedCustomObject({ ...G, name });
  out.patchStorm = { codes, n, labels: final.metadata.labels };
}

try {
  await crud();
  await watch();
  await informer();
  await paging();
  await patchStorm();
  console.log(JSON.stringify(out));
} catch (e) {
  console.error('client-node failed:', e && e.stack ? e.stack : e, JSON.stringify(out));
  process.exit(1);
}
