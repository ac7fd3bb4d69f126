"""A real container registry on loopback for knap's end-to-end tests.

Registry runs Debian's docker-registry (distribution 2.8) on 127.0.0.1 with,
by default, TLS from a throw-away test CA and htpasswd (bcrypt) basic auth.
Images are pushed into it with skopeo. Helpers build test images offline:
the project's static test app packed by knap-mkimage, images with big random
layers (for mid-transfer faults), and a two-platform OCI index built here in
Python (linux/amd64 = the runnable test app, linux/arm64 = a different small
image).

Fixtures (loaded by conftest.py via pytest_plugins):
  registry_ca      session-wide RegistryCA (CA + server cert for 127.0.0.1/localhost)
  registry         started Registry, TLS + auth, stopped after the test
  make_registry    factory: make_registry(tls=True, auth=True) -> started Registry
  make_fault_proxy factory: make_fault_proxy(registry, tls=False) -> started FaultProxy
                   (registry_faults.py: corrupt / cut / go down / throttle)
  testapp_image    OCI archive of the runnable test app (session-wide, built once)
  containerd_ns    a fresh containerd namespace name, emptied and removed after the test
  knap_pull        runs `knap image pull` as a subprocess: knap_pull(image, config, *args)

Everything here is plain Python + subprocess; no traffic leaves loopback.
Not thread-safe unless stated: tests drive one Registry from one thread;
request-log reads (blob_gets) may run while the registry serves.
"""
import base64
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
import uuid

import pytest

from pods import containerd_ok
from ports import free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("KNAP_BUILD_DIR", os.path.join(ROOT, "build"))
KNAP = os.environ.get("KNAP_CLI") or os.path.join(BUILD, "tools", "knap")  # KNAP_CLI: another knap binary
MKIMAGE = os.path.join(BUILD, "tools", "mkimage", "knap-mkimage")
TESTAPP = os.path.join(BUILD, "tests", "apps", "knap-testapp")
DOCKER_REGISTRY = "/usr/bin/docker-registry"
SKOPEO = shutil.which("skopeo") or "/usr/bin/skopeo"
HTPASSWD = shutil.which("htpasswd") or "/usr/bin/htpasswd"
OPENSSL = shutil.which("openssl") or "/usr/bin/openssl"

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
ACCEPT_ALL = ", ".join([OCI_INDEX, OCI_MANIFEST, DOCKER_LIST, DOCKER_MANIFEST])


def require_tools():
    """Fails (not skips) when a registry test tool is missing: tools/setup.sh --test installs them."""
    missing = [p for p in (DOCKER_REGISTRY, SKOPEO, HTPASSWD, OPENSSL) if not os.path.exists(p)]
    if missing:
        pytest.fail(f"registry e2e tools missing: {missing} (install with tools/setup.sh --test: "
                    "docker-registry skopeo apache2-utils openssl)", pytrace=False)


def _run(args, **kw):
    p = subprocess.run(args, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args))} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


# --------------------------------------------------------------------------
# Test CA
# --------------------------------------------------------------------------
class RegistryCA:
    """A CA and one server certificate (SAN IP:127.0.0.1, DNS:localhost) in `directory`.

    Attributes: ca_cert, ca_key, server_cert, server_key (PEM paths), cert_dir
    (a directory holding only ca.crt, for skopeo's --*-cert-dir).
    """
    def __init__(self, directory):
        os.makedirs(directory, exist_ok=True)
        self.dir = directory
        self.ca_key = os.path.join(directory, "ca.key")
        self.ca_cert = os.path.join(directory, "ca.crt")
        self.server_key = os.path.join(directory, "server.key")
        self.server_cert = os.path.join(directory, "server.crt")
        self.cert_dir = os.path.join(directory, "certs.d")
        ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
        _run([OPENSSL, "req", "-x509", *ec, "-keyout", self.ca_key, "-out", self.ca_cert, "-days", "3",
              "-subj", "/CN=knap e2e test CA", "-addext", "basicConstraints=critical,CA:TRUE",
              "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
        csr = os.path.join(directory, "server.csr")
        _run([OPENSSL, "req", *ec, "-keyout", self.server_key, "-out", csr, "-subj", "/CN=127.0.0.1"])
        ext = os.path.join(directory, "server.ext")
        with open(ext, "w") as f:
            f.write("basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
                    "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n")
        _run([OPENSSL, "x509", "-req", "-in", csr, "-CA", self.ca_cert, "-CAkey", self.ca_key, "-CAcreateserial",
              "-out", self.server_cert, "-days", "3", "-extfile", ext])
        os.makedirs(self.cert_dir, exist_ok=True)
        shutil.copy(self.ca_cert, os.path.join(self.cert_dir, "ca.crt"))

    def client_context(self):
        """An ssl.SSLContext that trusts this CA (for Python clients of the registry)."""
        return ssl.create_default_context(cafile=self.ca_cert)

    def server_context(self):
        """An ssl.SSLContext serving the server certificate (for Python test servers)."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.server_cert, self.server_key)
        return ctx


# --------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------
_ACCESS_RE = re.compile(r'"(GET|HEAD|PUT|POST|PATCH|DELETE) (\S+) HTTP/[\d.]+" (\d{3}) (\d+|-)')


class Registry:
    """docker-registry on 127.0.0.1:<port>. start()/stop() may be repeated; the port stays.

    Registry(workdir, ca=None, tls=True, auth=True, user="knap", password=<random>)
      .host            "127.0.0.1:PORT"  (the registry part of image names)
      .url             "https://127.0.0.1:PORT" (http:// when tls=False)
      .image(repo_tag) "127.0.0.1:PORT/" + repo_tag
    """

    def __init__(self, workdir, ca=None, tls=True, auth=True, user="knap", password=None, port=None):
        require_tools()
        self.workdir = workdir
        os.makedirs(workdir, exist_ok=True)
        self.tls = tls
        self.auth = auth
        self.user = user
        self.password = password or ("pw-" + uuid.uuid4().hex[:12])
        self.port = port or free_port()
        self.ca = ca if ca is not None else (RegistryCA(os.path.join(workdir, "ca")) if tls else None)
        self.storage = os.path.join(workdir, "storage")
        self.log_path = os.path.join(workdir, "registry.log")
        self.config_path = os.path.join(workdir, "registry.yaml")
        self.htpasswd_path = os.path.join(workdir, "htpasswd")
        self.proc = None
        if auth:
            line = _run([HTPASSWD, "-Bbn", user, self.password]).stdout.strip()
            with open(self.htpasswd_path, "w") as f:
                f.write(line + "\n")
        cfg = [
            "version: 0.1",
            "log:",
            "  level: info",
            "  formatter: text",
            "  accesslog:",
            "    disabled: false",
            "storage:",
            "  filesystem:",
            f"    rootdirectory: {self.storage}",
            "  delete:",
            "    enabled: true",
            "http:",
            f"  addr: 127.0.0.1:{self.port}",
            f"  secret: {uuid.uuid4().hex}",
        ]
        if tls:
            cfg += ["  tls:", f"    certificate: {self.ca.server_cert}", f"    key: {self.ca.server_key}"]
        if auth:
            cfg += ["auth:", "  htpasswd:", "    realm: knap-e2e", f"    path: {self.htpasswd_path}"]
        with open(self.config_path, "w") as f:
            f.write("\n".join(cfg) + "\n")

    # --- names ------------------------------------------------------------
    @property
    def host(self):
        return f"127.0.0.1:{self.port}"

    @property
    def url(self):
        return ("https://" if self.tls else "http://") + self.host

    def image(self, repo_ref):
        """'app:v1' or 'app@sha256:..' -> '127.0.0.1:PORT/app:v1'."""
        return f"{self.host}/{repo_ref}"

    # --- process ----------------------------------------------------------
    def start(self, timeout=20):
        if self.alive():
            return self
        log = open(self.log_path, "a")
        log.write(f"--- start {time.time():.3f} ---\n")
        log.flush()
        self.proc = subprocess.Popen([DOCKER_REGISTRY, "serve", self.config_path], stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"docker-registry exited with {self.proc.returncode}:\n{self.log()}")
            try:
                code, _, _ = self.request("GET", "/v2/", timeout=1, creds=False)
                if code in (200, 401):
                    return self
            except (urllib.error.URLError, ConnectionError, OSError, ssl.SSLError):
                pass
            time.sleep(0.05)
        raise RuntimeError("docker-registry did not answer:\n" + self.log())

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, kill=False):
        """Stops the registry (SIGTERM, or SIGKILL with kill=True); afterwards its port refuses connections."""
        if self.alive():
            self.proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def log(self, tail=8000):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-tail:]
        except OSError:
            return ""

    # --- HTTP (Python client, for checks) ---------------------------------
    def request(self, method, path, headers=None, timeout=10, creds=True):
        """(status, body bytes, headers dict) of a request straight to the registry."""
        req = urllib.request.Request(self.url + path, method=method)
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        if creds and self.auth:
            token = base64.b64encode(f"{self.user}:{self.password}".encode()).decode()
            req.add_header("Authorization", "Basic " + token)
        ctx = self.ca.client_context() if self.tls else None
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=ctx) as r:
                return r.status, r.read(), {k.lower(): v for k, v in r.headers.items()}
        except urllib.error.HTTPError as e:
            return e.code, e.read(), {k.lower(): v for k, v in e.headers.items()}

    def manifest(self, repo, ref):
        """(media type, parsed JSON, digest) of repo:ref / repo@digest as the registry serves it."""
        code, body, hdrs = self.request("GET", f"/v2/{repo}/manifests/{ref}", {"Accept": ACCEPT_ALL})
        if code != 200:
            raise AssertionError(f"GET manifest {repo}:{ref}: {code} {body[:300]!r}")
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        assert hdrs.get("docker-content-digest", digest) == digest
        return hdrs.get("content-type"), json.loads(body), digest

    def digest(self, repo, tag):
        """The digest `repo:tag` points at (of an index, for a multi-platform image)."""
        return self.manifest(repo, tag)[2]

    def platform_digests(self, repo, ref):
        """{"linux/amd64": manifest digest, ...} of an index; {} for a single manifest."""
        mt, doc, _ = self.manifest(repo, ref)
        out = {}
        for m in doc.get("manifests", []):
            p = m.get("platform", {})
            key = f"{p.get('os')}/{p.get('architecture')}" + (f"/{p['variant']}" if p.get("variant") else "")
            out[key] = m["digest"]
        return out

    def blobs(self, repo, ref, platform="linux/amd64"):
        """[(digest, size)] of config + layers of repo:ref for `platform` (resolving an index)."""
        mt, doc, _ = self.manifest(repo, ref)
        if "manifests" in doc:
            mt, doc, _ = self.manifest(repo, self.platform_digests(repo, ref)[platform])
        return [(d["digest"], d["size"]) for d in [doc["config"], *doc["layers"]]]

    # --- pushing (skopeo) -------------------------------------------------
    def skopeo_dest_args(self, creds=True):
        args = []
        if self.tls:
            args += ["--dest-tls-verify=true", "--dest-cert-dir", self.ca.cert_dir]
        else:
            args += ["--dest-tls-verify=false"]
        if self.auth and creds:
            args += ["--dest-creds", f"{self.user}:{self.password}"]
        else:
            args += ["--dest-no-creds"]
        return args

    def push(self, source, repo_tag, all=None, format=None, preserve_digests=True, timeout=300):
        """Pushes an image with skopeo and returns the digest repo_tag now points at.

        source: an OCI archive file (oci-archive:), an OCI layout directory
        (oci:, optionally "DIR:tag"), or any skopeo transport string
        ("oci:DIR:tag", "docker-archive:..."). all: copy every image of an index
        (default: True for directories, i.e. index layouts). format: "oci" or
        "v2s2" to convert manifests (v2s2 = Docker schema 2 / manifest list).
        preserve_digests: fail rather than let skopeo rewrite manifests (the
        helpers here build gzip layers, so what is pushed is what was built).
        """
        if re.match(r"^[a-z-]+:", source) and not os.path.exists(source):
            src = source
        elif os.path.isdir(source.split(":")[0]):
            src = "oci:" + source
        else:
            src = "oci-archive:" + source
        if all is None:
            all = src.startswith("oci:")
        digestfile = os.path.join(self.workdir, f"digest-{uuid.uuid4().hex[:8]}")
        args = [SKOPEO, "copy", "--retry-times", "2", "--digestfile", digestfile, *self.skopeo_dest_args()]
        if all:
            args.append("--all")
        if format:
            args += ["--format", format]
        elif preserve_digests:
            args.append("--preserve-digests")
        _run([*args, src, "docker://" + self.image(repo_tag)], timeout=timeout)
        with open(digestfile) as f:
            pushed = f.read().strip()
        repo, _, tag = repo_tag.rpartition(":")
        assert self.digest(repo, tag) == pushed, "registry serves a different digest than skopeo pushed"
        return pushed

    # --- client configuration --------------------------------------------
    def auth_file(self, path=None, user=None, password=None, host=None):
        """Writes a Docker config.json with credentials (own, or the given ones) for `host` (default:
        this registry; pass a FaultProxy's host to reach the registry through it); returns its path."""
        path = path or os.path.join(self.workdir, f"auth-{uuid.uuid4().hex[:8]}.json")
        token = base64.b64encode(f"{user or self.user}:{password or self.password}".encode()).decode()
        with open(path, "w") as f:
            json.dump({"auths": {host or self.host: {"auth": token}}}, f)
        return path

    def ca_file(self):
        """PEM of the CA the registry's certificate chains to (None without TLS)."""
        return self.ca.ca_cert if self.tls else None

    def knap_config(self, auth=True, ca=True, insecure=(), user=None, password=None, host=None, extra=""):
        """Lines for the `knap:` section (two-space indented) pointing a client at this registry.

        auth: write credentials (own, or user/password given) into an auth file;
        ca: trust the test CA; insecure: host:port list allowed over plain HTTP
        (this registry's host is added when it runs without TLS); host: the
        registry name the credentials are for (a FaultProxy's host).
        """
        lines = []
        if auth:
            lines.append(f"  registry-auth-file: {self.auth_file(user=user, password=password, host=host)}")
        if ca and self.tls:
            lines.append(f"  registry-ca-file: {self.ca_file()}")
        hosts = list(insecure) + ([] if self.tls else [self.host])
        if hosts:
            lines.append("  insecure-registries: [" + ", ".join(f'"{h}"' for h in hosts) + "]")
        return "\n".join(lines) + "\n" + extra

    def write_config(self, path, namespace=None, **kw):
        """Writes a whole knapd/CLI config file (knap: section) and returns its path; kw as knap_config()."""
        body = "knap:\n"
        if namespace:
            body += f"  containerd-namespace: {namespace}\n"
        body += self.knap_config(**kw)
        with open(path, "w") as f:
            f.write(body)
        return path

    # --- request log ------------------------------------------------------
    def requests(self):
        """[(method, path, status, bytes)] from the access log, oldest first."""
        out = []
        for line in self.log(tail=10 ** 9).splitlines():
            m = _ACCESS_RE.search(line)
            if m:
                out.append((m.group(1), m.group(2), int(m.group(3)), 0 if m.group(4) == "-" else int(m.group(4))))
        return out

    def blob_gets(self, repo=None, digest=None, status=None):
        """Number of GET /v2/<repo>/blobs/<digest> requests served (any repo/digest when None)."""
        n = 0
        for method, path, code, _ in self.requests():
            m = re.match(r"^/v2/(.+)/blobs/(sha256:[0-9a-f]{64})$", path.split("?")[0])
            if method != "GET" or not m:
                continue
            if (repo is None or m.group(1) == repo) and (digest is None or m.group(2) == digest) and \
                    (status is None or code == status):
                n += 1
        return n


# --------------------------------------------------------------------------
# Test images
# --------------------------------------------------------------------------
def build_testapp_image(out, name="dev.local/knap-testapp:v1", platform=None, extra_files=()):
    """An OCI archive of the runnable static test app (knap-mkimage); returns `out`.

    extra_files: [(src, dest)] added to the image (e.g. a big random file).
    """
    if not os.path.exists(MKIMAGE) or not os.path.exists(TESTAPP):
        pytest.fail(f"build knap-mkimage and the test app first: ninja -C {BUILD} tools/mkimage/knap-mkimage "
                    "tests/apps/knap-testapp", pytrace=False)
    args = [MKIMAGE, "--out", out, "--name", name, "--file", f"{TESTAPP}:/app/knap-testapp",
            "--entrypoint", "/app/knap-testapp", "--user", "app", "--workdir", "/app", "--expose", "8080", "--gzip"]
    for src, dest in extra_files:
        args += ["--file", f"{src}:{dest}"]
    if platform:
        args += ["--platform", platform]
    _run(args)
    return out


def _tar_bytes(files):
    """A deterministic tar of {path: bytes} (parent directories included)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        dirs = set()
        for path in sorted(files):
            parts = path.strip("/").split("/")
            for i in range(1, len(parts)):
                d = "/".join(parts[:i])
                if d not in dirs:
                    dirs.add(d)
                    ti = tarfile.TarInfo(d)
                    ti.type = tarfile.DIRTYPE
                    ti.mode = 0o755
                    t.addfile(ti)
            data = files[path]
            ti = tarfile.TarInfo(path.strip("/"))
            ti.size = len(data)
            ti.mode = 0o755
            t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


class OciLayout:
    """Writes an OCI image layout directory by hand (blobs, index.json, oci-layout).

    add_blob(bytes) -> descriptor dict; add_image(layers, platform, ...) ->
    manifest descriptor; add_index(manifest_descs) -> index descriptor;
    tag(desc, "v1") records it in index.json under org.opencontainers.image.ref.name.
    """

    def __init__(self, directory):
        self.dir = directory
        os.makedirs(os.path.join(directory, "blobs", "sha256"), exist_ok=True)
        with open(os.path.join(directory, "oci-layout"), "w") as f:
            f.write('{"imageLayoutVersion":"1.0.0"}')
        self.refs = []

    def add_blob(self, data, media_type):
        digest = hashlib.sha256(data).hexdigest()
        with open(os.path.join(self.dir, "blobs", "sha256", digest), "wb") as f:
            f.write(data)
        return {"mediaType": media_type, "digest": "sha256:" + digest, "size": len(data)}

    def add_image(self, layers, platform="linux/amd64", entrypoint=None, gzip_layers=True):
        """layers: list of {path: bytes} file maps, one per layer. Returns the manifest descriptor."""
        os_, arch = platform.split("/")[:2]
        layer_descs, diff_ids = [], []
        for files in layers:
            raw = _tar_bytes(files)
            diff_ids.append("sha256:" + hashlib.sha256(raw).hexdigest())
            if gzip_layers:
                layer_descs.append(self.add_blob(gzip.compress(raw, mtime=0), OCI_LAYER_GZIP))
            else:
                layer_descs.append(self.add_blob(raw, OCI_LAYER))
        config = {"architecture": arch, "os": os_, "config": {"Entrypoint": entrypoint or ["/bin/true"]},
                  "rootfs": {"type": "layers", "diff_ids": diff_ids}}
        cdesc = self.add_blob(json.dumps(config, sort_keys=True).encode(), OCI_CONFIG)
        manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": cdesc, "layers": layer_descs}
        mdesc = self.add_blob(json.dumps(manifest, sort_keys=True).encode(), OCI_MANIFEST)
        mdesc["platform"] = {"architecture": arch, "os": os_}
        return mdesc

    def import_archive(self, archive):
        """Copies the blobs of a single-image OCI archive (knap-mkimage output) in; returns its manifest descriptor."""
        with tarfile.open(archive) as t:
            index = json.load(t.extractfile("index.json"))
            for m in t.getmembers():
                if m.isfile() and m.name.startswith("blobs/sha256/"):
                    dest = os.path.join(self.dir, m.name)
                    with open(dest, "wb") as f:
                        f.write(t.extractfile(m).read())
        desc = dict(index["manifests"][0])
        desc.pop("annotations", None)
        if "platform" not in desc:
            desc["platform"] = {"architecture": "amd64", "os": "linux"}
        return desc

    def add_index(self, manifests):
        index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}
        return self.add_blob(json.dumps(index, sort_keys=True).encode(), OCI_INDEX)

    def tag(self, desc, tag):
        d = {k: v for k, v in desc.items() if k != "platform"}
        d["annotations"] = {"org.opencontainers.image.ref.name": tag}
        self.refs.append(d)
        with open(os.path.join(self.dir, "index.json"), "w") as f:
            json.dump({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": self.refs}, f)
        return f"{self.dir}:{tag}"


def build_multiplatform_index(directory, amd64_archive, tag="v1", arm64_files=None):
    """An OCI layout dir whose `tag` is an index of linux/amd64 (the given runnable archive) and
    linux/arm64 (a different small image). Returns (source for Registry.push, {platform: manifest digest})."""
    lay = OciLayout(directory)
    amd = lay.import_archive(amd64_archive)
    arm = lay.add_image([arm64_files or {"arm64/hello.txt": b"this is the arm64 image, it does not run here\n"}],
                        platform="linux/arm64", entrypoint=["/arm64/hello"])
    idx = lay.add_index([amd, arm])
    src = lay.tag(idx, tag)
    return src, {"linux/amd64": amd["digest"], "linux/arm64": arm["digest"]}


def build_big_image(directory, tag="v1", layer_mb=(8, 8), seed=None):
    """An OCI layout with one linux/amd64 image of len(layer_mb) layers of random (incompressible) data,
    distinct per call. Returns the source for Registry.push (single image, push with all=False)."""
    lay = OciLayout(directory)
    seed = seed or uuid.uuid4().hex
    layers = [{f"data/big{i}-{seed}.bin": os.urandom(mb * 1024 * 1024)} for i, mb in enumerate(layer_mb)]
    m = lay.add_image(layers, platform="linux/amd64")
    return lay.tag(m, tag)


# --------------------------------------------------------------------------
# containerd helpers
# --------------------------------------------------------------------------
def ctr(ns, *args, check=True, timeout=120):
    p = subprocess.run(["ctr", "-n", ns, *args], capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"ctr -n {ns} {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def ctr_images(ns):
    """{name: target digest} of the images in namespace ns."""
    out = {}
    for line in ctr(ns, "images", "ls").stdout.splitlines()[1:]:
        cols = line.split()
        if len(cols) >= 3:
            out[cols[0]] = cols[2]
    return out


def ctr_content(ns):
    """Set of blob digests in ns's content store."""
    return {line.split()[0] for line in ctr(ns, "content", "ls", "-q").stdout.splitlines() if line.strip()}


def cleanup_namespace(ns):
    """Removes every image, lease, container, content blob and snapshot of ns, then ns itself."""
    for c in ctr(ns, "containers", "ls", "-q", check=False).stdout.split():
        ctr(ns, "tasks", "kill", "-s", "SIGKILL", c, check=False)
        ctr(ns, "tasks", "rm", "-f", c, check=False)
        ctr(ns, "containers", "rm", c, check=False)
    for lease in ctr(ns, "leases", "ls", "-q", check=False).stdout.split():
        ctr(ns, "leases", "rm", lease, check=False)
    images = ctr(ns, "images", "ls", "-q", check=False).stdout.split()
    if images:
        ctr(ns, "images", "rm", "--sync", *images, check=False)
    blobs = ctr(ns, "content", "ls", "-q", check=False).stdout.split()
    if blobs:
        ctr(ns, "content", "rm", *blobs, check=False)
    for _ in range(3):
        snaps = [line.split()[0] for line in ctr(ns, "snapshots", "ls", check=False).stdout.splitlines()[1:]
                 if line.strip()]
        if not snaps:
            break
        for s in snaps:
            ctr(ns, "snapshots", "rm", s, check=False)
    subprocess.run(["ctr", "namespaces", "rm", ns], capture_output=True)



def teardown_knapd_pods(k, ns, bridge, timeout=30):
    """The end of a containerd-backed knapd test: deletes every Service in `default` (when knapd still runs),
    waits (bounded) for the runner to destroy their pods, stops knapd, then removes what is left in containerd
    namespace `ns` and the test's bridge."""
    if k is not None and k.alive():
        api = "/apis/serving.knative.dev/v1/namespaces/default/services"
        code, body, _ = k.http("GET", api)
        if code == 200:
            for svc in json.loads(body)["items"]:
                k.http("DELETE", f"{api}/{svc['metadata']['name']}")
        deadline = time.time() + timeout
        while time.time() < deadline and ctr(ns, "containers", "ls", "-q", check=False).stdout.strip():
            time.sleep(0.2)
        k.stop()
    cleanup_namespace(ns)
    subprocess.run(["ip", "link", "del", bridge], capture_output=True)

# --------------------------------------------------------------------------
# The CLI
# --------------------------------------------------------------------------
class PullResult:
    """Outcome of one `knap image pull`: rc, stdout, stderr, seconds; digest_ref/bytes parsed on success."""

    _OK = re.compile(r"^pulled (\S+) -> (\S+) \((\d+) bytes fetched\)$")
    REASONS = ("Unauthorized", "ManifestUnknown", "RegistryUnreachable", "DigestMismatch", "InvalidImageName",
               "ImagePullFailed")
    _ERR = re.compile(r"^error: pull (.*?): (" + "|".join(REASONS) + r"): (.*)$", re.M)
    _ERR_ANY = re.compile(r"^error: pull (\S+): (\w+): (.*)$", re.M)

    def __init__(self, proc, seconds):
        self.rc = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        self.seconds = seconds
        lines = [ln for ln in self.stdout.replace("\r", "\n").splitlines() if ln.strip()]
        m = self._OK.match(lines[-1].strip()) if lines else None
        self.digest_ref = m.group(2) if m else None
        self.bytes_fetched = int(m.group(3)) if m else None
        e = self._ERR.search(self.stderr) or self._ERR_ANY.search(self.stderr)
        self.reason = e.group(2) if e else None
        self.message = e.group(3) if e else None

    def __repr__(self):
        return f"PullResult(rc={self.rc}, {self.seconds:.1f}s)\n--- stdout ---\n{self.stdout[-3000:]}\n" \
               f"--- stderr ---\n{self.stderr[-3000:]}"


def knap_pull_cmd(image, config, *args):
    return [KNAP, "image", "pull", image, "--config", config, *args]


def run_knap_pull(image, config, *args, timeout=300):
    """Runs `knap image pull IMAGE --config CONFIG ARGS...` and returns a PullResult."""
    if not os.path.exists(KNAP):
        pytest.fail(f"knap CLI not built: ninja -C {BUILD} tools/knap/knap", pytrace=False)
    t0 = time.time()
    p = subprocess.run(knap_pull_cmd(image, config, *args), capture_output=True, text=True, timeout=timeout)
    return PullResult(p, time.time() - t0)


# --------------------------------------------------------------------------
# Fixtures
# --------------------------------------------------------------------------
@pytest.fixture(scope="session")
def registry_ca(tmp_path_factory):
    require_tools()
    return RegistryCA(str(tmp_path_factory.mktemp("knap-ca")))


@pytest.fixture
def make_registry(tmp_path, registry_ca):
    made = []

    def make(tls=True, auth=True, **kw):
        r = Registry(str(tmp_path / f"registry{len(made)}"), ca=registry_ca if tls else None, tls=tls, auth=auth,
                     **kw)
        made.append(r)
        return r.start()

    yield make
    for r in made:
        r.stop()


@pytest.fixture
def registry(make_registry):
    return make_registry()


@pytest.fixture
def make_fault_proxy():
    """Factory: make_fault_proxy(registry, tls=False) -> started registry_faults.FaultProxy, stopped after the test."""
    from registry_faults import FaultProxy
    made = []

    def make(upstream, tls=False):
        p = FaultProxy(upstream, tls=tls).start()
        made.append(p)
        return p

    yield make
    for p in made:
        p.stop()


@pytest.fixture(scope="session")
def testapp_image(tmp_path_factory):
    """Path of an OCI archive of the runnable test app (linux/amd64, built once per session)."""
    return build_testapp_image(str(tmp_path_factory.mktemp("knap-img") / "testapp.tar"))


def require_root_and_containerd():
    """Skips (loudly) when not root; fails when root but containerd does not answer."""
    if os.geteuid() != 0:
        pytest.skip("!!! registry pull e2e tests SKIPPED: they need root (containerd) !!!")
    if not containerd_ok():
        pytest.fail("containerd does not answer `ctr version` (is it running?)", pytrace=False)


@pytest.fixture
def containerd_ns():
    require_root_and_containerd()
    ns = f"knap-e2e-reg-{uuid.uuid4().hex[:8]}"
    yield ns
    cleanup_namespace(ns)


@pytest.fixture
def knap_pull():
    return run_knap_pull
