// Revision garbage collection policy (KNATIVE-CONTRACT §6, Knative's
// pkg/reconciler/gc): which of a Configuration's Revisions to delete.
//
// A pure function of the revisions, the config-gc settings and `now`; the
// Configuration reconciler gathers the inputs and performs the deletes.
// Thread-safe.
#pragma once

#include <string>
#include <vector>

#include "common/clock.h"
#include "common/config.h"

namespace knap::controller {

struct GcCandidate {
  std::string name;
  WallTime created;      // metadata.creationTimestamp
  WallTime last_active;  // routingStateModified annotation, else creationTimestamp
  // Never collected: the Configuration's latestReadyRevisionName, revisions
  // annotated serving.knative.dev/no-gc: "true", and any revision whose
  // routingState is not "reserve" (pending, active or unset).
  bool active = false;
};

// Names to delete, oldest last-active first:
//  1. nothing when max, retain-since-create and retain-since-last-active are all disabled;
//  2. nothing when the configuration has <= min revisions;
//  3. drop active ones; nothing when <= min non-active remain;
//  4. walking oldest last-active first, delete stale ones (age >= retain-since-create
//     AND idle >= retain-since-last-active, a disabled check counting as satisfied,
//     both disabled = never stale) while more than min remain;
//  5. if the non-stale ones still exceed max, delete their oldest until max remain.
std::vector<std::string> revisionsToCollect(const GcConfig& gc, std::vector<GcCandidate> revisions,
                                            WallTime now);

}  // namespace knap::controller
