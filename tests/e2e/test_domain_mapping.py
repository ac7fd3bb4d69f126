"""DomainMapping (serving.knative.dev/v1beta1) and ClusterDomainClaim
(networking.internal.knative.dev/v1alpha1) with the real kubectl.

- API: discovery lists both kinds; `kubectl apply` of a DomainMapping; Knative's
  validation (a domain name, not under cluster.local, spec.ref in the same
  namespace); status url/address and the DomainClaimed, ReferenceResolved,
  CertificateProvisioned, IngressReady and Ready conditions; the claim is
  created, a second DomainMapping of the same domain in another namespace gets
  DomainClaimed False (DomainAlreadyClaimed) until the first is deleted; with
  autocreate-cluster-domain-claims false a claim must exist first; `kubectl
  get dm` and `knap get domainmappings` print them.
- Router (real pods): a request with the mapped Host reaches the Service; after
  `kubectl delete` it is 404.
"""
import json
import os

import pytest

from conftest import Knapd, requires_kubectl

DM_API = "/apis/serving.knative.dev/v1beta1/namespaces/{ns}/domainmappings"
CDC_API = "/apis/networking.internal.knative.dev/v1alpha1/clusterdomainclaims"


def domain_mapping(name, target, ns=None, kind="Service", api_version="serving.knative.dev/v1"):
    meta = {"name": name}
    if ns:
        meta["namespace"] = ns
    return json.dumps({"apiVersion": "serving.knative.dev/v1beta1", "kind": "DomainMapping", "metadata": meta,
                       "spec": {"ref": {"apiVersion": api_version, "kind": kind, "name": target}}})


def ksvc(name, ns="default"):
    return json.dumps({"apiVersion": "serving.knative.dev/v1", "kind": "Service",
                       "metadata": {"name": name, "namespace": ns},
                       "spec": {"template": {"spec": {"containers": [
                           {"image": "example.com/hello@sha256:" + "a" * 64}]}}}})


def get_dm(k, name, ns="default"):
    code, body, _ = k.http("GET", DM_API.format(ns=ns) + "/" + name)
    return json.loads(body) if code == 200 else None


def condition(obj, ctype):
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return {}


def observed(obj):
    return obj is not None and (obj.get("status") or {}).get("observedGeneration") == obj["metadata"].get("generation")


@requires_kubectl
def test_domain_mapping_api_claims_and_validation(knapd):
    k = knapd
    # Discovery: kubectl finds both kinds (and their short names).
    out = k.kubectl("api-resources", "--api-group=serving.knative.dev").stdout
    assert any(line.split()[:5] == ["domainmappings", "dm", "serving.knative.dev/v1beta1", "true", "DomainMapping"]
               for line in out.splitlines()), out
    out = k.kubectl("api-resources", "--api-group=networking.internal.knative.dev").stdout
    assert any(line.split()[:5] == ["clusterdomainclaims", "cdc", "networking.internal.knative.dev/v1alpha1",
                                    "false", "ClusterDomainClaim"] for line in out.splitlines()), out

    k.kubectl("apply", "-f", "-", input=ksvc("hello"))
    k.kubectl("apply", "-f", "-", input=domain_mapping("app.example.com", "hello"))
    dm = k.wait_for(lambda: (lambda d: d if observed(d) and condition(d, "Ready").get("status") == "True" else None)(
        get_dm(k, "app.example.com")), timeout=30, what="the DomainMapping Ready")
    st = dm["status"]
    assert st["url"] == "http://app.example.com" and st["address"]["url"] == "http://app.example.com", st
    for ctype in ("DomainClaimed", "ReferenceResolved", "IngressReady", "CertificateProvisioned"):
        assert condition(dm, ctype)["status"] == "True", (ctype, st)
    assert condition(dm, "CertificateProvisioned")["reason"] == "TLSNotEnabled", st
    assert dm["spec"]["ref"]["namespace"] == "default", dm["spec"]  # defaulted as Knative's KReference does
    assert dm["metadata"]["annotations"]["serving.knative.dev/creator"], dm["metadata"]
    # The claim was created for the namespace.
    claim = k.get_json(CDC_API + "/app.example.com")
    assert claim["spec"] == {"namespace": "default"} and "namespace" not in claim["metadata"], claim
    out = k.kubectl("get", "dm").stdout.splitlines()
    assert out[0].split() == ["NAME", "URL", "READY", "REASON"], out
    assert out[1].split() == ["app.example.com", "http://app.example.com", "True"], out
    out = k.kubectl("get", "clusterdomainclaims").stdout.splitlines()
    assert out[0].split() == ["NAME", "NAMESPACE", "AGE"] and out[1].split()[:2] == ["app.example.com", "default"], out
    out = k.knap("get", "domainmappings").stdout
    assert "app.example.com" in out and "http://app.example.com" in out, out

    # The same domain from another namespace: the claim is held.
    k.kubectl("create", "namespace", "team-b")
    k.kubectl("apply", "-f", "-", input=ksvc("hello", ns="team-b"))
    k.kubectl("apply", "-f", "-", input=domain_mapping("app.example.com", "hello", ns="team-b"))
    dm_b = k.wait_for(lambda: (lambda d: d if observed(d) and condition(d, "DomainClaimed") else None)(
        get_dm(k, "app.example.com", "team-b")), timeout=30, what="team-b's DomainMapping reconciled")
    claimed = condition(dm_b, "DomainClaimed")
    assert claimed["status"] == "False" and claimed["reason"] == "DomainAlreadyClaimed", dm_b["status"]
    assert claimed["message"] == "The domain name is already in use by another DomainMapping", claimed
    assert condition(dm_b, "Ready")["status"] == "False", dm_b["status"]
    assert condition(dm_b, "Ready")["reason"] == "DomainAlreadyClaimed", dm_b["status"]
    # Deleting the holder releases the claim; the waiting mapping takes it.
    k.kubectl("delete", "domainmapping", "app.example.com")
    k.wait_for(lambda: condition(get_dm(k, "app.example.com", "team-b"), "Ready").get("status") == "True",
               timeout=30, what="team-b's DomainMapping to take the claim")
    assert k.get_json(CDC_API + "/app.example.com")["spec"] == {"namespace": "team-b"}

    # A reference that does not resolve.
    k.kubectl("apply", "-f", "-", input=domain_mapping("missing.example.com", "nope"))
    dm = k.wait_for(lambda: (lambda d: d if observed(d) and condition(d, "ReferenceResolved") else None)(
        get_dm(k, "missing.example.com")), timeout=30, what="the unresolved DomainMapping")
    resolved = condition(dm, "ReferenceResolved")
    assert resolved["status"] == "False" and resolved["reason"] == "ResolveFailed", dm["status"]
    assert 'services.serving.knative.dev "nope" not found' in resolved["message"], resolved
    # ... resolves once the Service exists.
    k.kubectl("apply", "-f", "-", input=ksvc("nope"))
    k.wait_for(lambda: condition(get_dm(k, "missing.example.com"), "Ready").get("status") == "True",
               timeout=30, what="the DomainMapping to resolve its new Service")

    # Knative's validation, through kubectl.
    def refused(doc):
        p = k.kubectl("apply", "-f", "-", input=doc, check=False)
        assert p.returncode != 0, p.stdout
        return p.stderr
    err = refused(domain_mapping("notallowed.svc.cluster.local", "hello"))
    assert ('invalid name "notallowed.svc.cluster.local": must not be a subdomain of cluster local domain '
            '"cluster.local"') in err, err
    err = refused(domain_mapping("localhost", "hello"))
    assert "should be a domain with at least two segments separated by dots" in err, err
    err = refused(domain_mapping("Bad_Name.example.com", "hello"))
    assert "metadata.name" in err and "RFC 1123" in err, err
    err = refused(domain_mapping("other.example.com", "hello", ns="default").replace(
        '"name": "hello"', '"name": "hello", "namespace": "team-b"'))
    assert "spec.ref.namespace" in err and "mismatched namespaces" in err, err
    err = refused(json.dumps({"apiVersion": "serving.knative.dev/v1beta1", "kind": "DomainMapping",
                              "metadata": {"name": "x.example.com"}, "spec": {"ref": {"name": "hello"}}}))
    assert "spec.ref.apiVersion" in err and "spec.ref.kind" in err, err
    err = refused(json.dumps({"apiVersion": "serving.knative.dev/v1beta1", "kind": "DomainMapping",
                              "metadata": {"name": "x.example.com"},
                              "spec": {"ref": {"name": "hello", "kind": "Service",
                                               "apiVersion": "serving.knative.dev/v1"}, "bogus": 1}}))
    assert 'unknown field "spec.bogus"' in err, err

    # Deleting the namespace deletes its DomainMappings and releases their claims.
    k.kubectl("delete", "namespace", "team-b")
    assert k.get_json(DM_API.format(ns="team-b"))["items"] == []
    k.wait_for(lambda: k.http("GET", CDC_API + "/app.example.com")[0] == 404, timeout=30,
               what="team-b's claim released")


@requires_kubectl
def test_domain_mapping_needs_a_claim_without_autocreate(workdir):
    k = Knapd(workdir, extra_config="network:\n  autocreate-cluster-domain-claims: \"false\"\n").start()
    try:
        k.kubectl("apply", "-f", "-", input=ksvc("hello"))
        k.kubectl("apply", "-f", "-", input=domain_mapping("app.example.com", "hello"))
        dm = k.wait_for(lambda: (lambda d: d if observed(d) and condition(d, "DomainClaimed") else None)(
            get_dm(k, "app.example.com")), timeout=30, what="the DomainMapping reconciled")
        assert condition(dm, "DomainClaimed")["status"] == "False", dm["status"]
        assert k.http("GET", CDC_API + "/app.example.com")[0] == 404
        # An operator's claim for the namespace lets it through.
        claim = {"apiVersion": "networking.internal.knative.dev/v1alpha1", "kind": "ClusterDomainClaim",
                 "metadata": {"name": "app.example.com"}, "spec": {"namespace": "default"}}
        k.kubectl("apply", "-f", "-", input=json.dumps(claim))
        k.wait_for(lambda: condition(get_dm(k, "app.example.com"), "Ready").get("status") == "True",
                   timeout=30, what="the DomainMapping Ready with the operator's claim")
        p = k.kubectl("apply", "-f", "-", check=False, input=json.dumps(
            {"apiVersion": "networking.internal.knative.dev/v1alpha1", "kind": "ClusterDomainClaim",
             "metadata": {"name": "b.example.com"}, "spec": {}}))
        assert p.returncode != 0 and "spec.namespace" in p.stderr, p.stderr
        # Without autocreate, deleting the mapping leaves the operator's claim.
        k.kubectl("delete", "dm", "app.example.com")
        k.wait_for(lambda: get_dm(k, "app.example.com") is None, what="the DomainMapping gone")
        assert k.get_json(CDC_API + "/app.example.com")["spec"]["namespace"] == "default"
    finally:
        k.stop()


# ---------------------------------------------------------------- real pods

from test_serving import IMAGE, MKIMAGE, TESTAPP, containerd_ok, get, import_testapp  # noqa: E402

pods = pytest.mark.skipif(
    not containerd_ok() or not os.path.exists(TESTAPP) or not os.path.exists(MKIMAGE),
    reason="!!! real-pod end-to-end tests SKIPPED: need root, a running containerd and the built test app !!!")


@pods
@requires_kubectl
def test_domain_mapping_routes_its_host_to_the_service(workdir):
    from registry import teardown_knapd_pods
    tag = os.getpid() % 150 + 60
    ns, bridge = f"knap-e2e-dm-{tag}", f"knapdm{tag}"
    k = Knapd(workdir, runtime="containerd", extra_config=(
        f"  containerd-namespace: {ns}\n"
        f"  bridge-name: {bridge}\n"
        f"  pod-subnet: 10.227.{tag}.0/24\n"
        "  metrics-listen: 127.0.0.1:0\n"
        "  warm-pool-size: 0\n"))
    try:
        import_testapp(workdir, ns)
        k.start(timeout=60)
        svc = {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": {"name": "hello"},
               "spec": {"template": {"metadata": {"name": "hello-one"}, "spec": {"containers": [{"image": IMAGE}]}}}}
        k.kubectl("apply", "-f", "-", input=json.dumps(svc))
        k.kubectl("wait", "--for=condition=Ready", "ksvc/hello", "--timeout=120s", timeout=150)
        # Before the mapping the host is unknown to the router.
        assert get(k, "app.example.com")[0] == 404
        k.kubectl("apply", "-f", "-", input=domain_mapping("app.example.com", "hello"))
        k.kubectl("wait", "--for=condition=Ready", "domainmapping/app.example.com", "--timeout=60s", timeout=90)
        code, body = k.wait_for(lambda: (lambda r: r if r[0] == 200 else None)(get(k, "app.example.com")),
                                timeout=30, what="the mapped host answering")
        assert json.loads(body)["revision"] == "hello-one", body
        # Any case and a port in Host work as for Route hosts.
        assert get(k, "App.Example.COM:80")[0] == 200
        k.kubectl("delete", "domainmapping", "app.example.com")
        k.wait_for(lambda: get(k, "app.example.com")[0] == 404, timeout=30, what="the mapped host gone (404)")
        assert get(k, "hello.default.localhost")[0] == 200
    finally:
        teardown_knapd_pods(k, ns, bridge)
