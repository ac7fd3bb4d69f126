// The Knative reconcilers (Service, Configuration, Revision, Route,
// DomainMapping).
// Each reads the object from the Store and what it depends on from the
// ObjectCache (indexed lookups, never a list of a kind), computes the
// desired children/labels/status, and writes only what differs from the
// stored object (compared ignoring resourceVersion), with expected_rv so a
// concurrent writer makes the write fail with kConflict instead of being
// overwritten. A missing object means cleanup (Revision: backend.remove).
//
// Thread safety: not thread-safe; the Controller calls it from one thread at a
// time. The referenced Store, cache, backend, clock and config must outlive it.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "common/clock.h"
#include "common/config.h"
#include "common/status.h"
#include "controller/certificate_status.h"
#include "controller/ingress_status.h"
#include "controller/object_cache.h"
#include "controller/revision_backend.h"
#include "store/store.h"

namespace knap::controller {

class Reconcilers {
 public:
  Reconcilers(store::Store& store, const ObjectCache& cache, RevisionBackend& backend, TimeSource& clock,
              const Config& config);

  // Each returns OK when the object is converged (or absent), kConflict when a
  // concurrent write got in first (the caller re-runs), other codes for store
  // failures.
  Status reconcileService(const store::Key& key);
  Status reconcileConfiguration(const store::Key& key);
  Status reconcileRevision(const store::Key& key);
  Status reconcileRoute(const store::Key& key);
  // DomainMapping (Knative's domainmapping reconciler): takes the domain's
  // ClusterDomainClaim (creating it when network.autocreate-cluster-domain-
  // claims is on; a claim held by another namespace gives DomainClaimed False,
  // DomainAlreadyClaimed), resolves spec.ref to a Service or Route in the same
  // namespace (ReferenceResolved), and is IngressReady once the target Route
  // has traffic for the router to serve. A deleted mapping releases the claim
  // its namespace holds (with autocreate on, as Knative's FinalizeKind).
  Status reconcileDomainMapping(const store::Key& key);
  // The source of CertificateProvisioned for external hosts (the built-in
  // ACME client); nullptr (the default) = certificates are the operator's.
  // Set before the controller starts.
  void setCertificateStatus(const CertificateStatus* status) { certificates_ = status; }
  // The source of IngressReady: whether the router serves the Route's
  // traffic yet. nullptr (the default) = as soon as the traffic resolves.
  // Set before the controller starts.
  void setIngressStatus(const IngressStatus* status) { ingress_ = status; }

 private:
  // Writes desired over current when they differ; returns the stored result.
  StatusOr<store::Object> writeIfChanged(const store::Object& current, const nlohmann::json& desired);

  // Service.
  nlohmann::json desiredConfiguration(const nlohmann::json& svc, const nlohmann::json* existing) const;
  nlohmann::json desiredRoute(const nlohmann::json& svc, const nlohmann::json* existing) const;

  // Configuration.
  nlohmann::json makeRevision(const nlohmann::json& config, const std::string& name) const;
  Status collectGarbage(const nlohmann::json& config, const std::vector<store::Object>& revisions);

  // Route: keeps serving.knative.dev/routes and routingState in step with the
  // set of configurations/revisions the route references (empty sets on delete).
  Status syncRoutingMetadata(const std::string& ns, const std::string& route,
                             const std::set<std::string>& configs, const std::set<std::string>& revisions);

  store::Store& store_;
  const ObjectCache& cache_;
  RevisionBackend& backend_;
  TimeSource& clock_;
  const Config& config_;
  const CertificateStatus* certificates_ = nullptr;
  const IngressStatus* ingress_ = nullptr;
  // What backend.ensure() last saw per revision (uid, labels, annotations,
  // spec), so ensure() runs on create/change only and cannot feed a loop
  // through the backend's change callback. Kept as compact JSON text: a
  // parsed copy per Revision cost more memory than the ObjectCache.
  std::map<std::string, std::string> ensured_;
};

}  // namespace knap::controller
