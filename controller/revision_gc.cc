#include "controller/revision_gc.h"

#include <algorithm>

namespace knap::controller {

namespace {
bool isStale(const GcConfig& gc, const GcCandidate& rev, WallTime now) {
  const auto& since_create = gc.retain_since_create_time;
  const auto& since_active = gc.retain_since_last_active_time;
  if (!since_create && !since_active) return false;
  if (since_create && rev.created + *since_create > now) return false;
  if (since_active && rev.last_active + *since_active > now) return false;
  return true;
}
}  // namespace

std::vector<std::string> revisionsToCollect(const GcConfig& gc, std::vector<GcCandidate> revisions,
                                            WallTime now) {
  std::vector<std::string> out;
  if (!gc.max_non_active_revisions && !gc.retain_since_create_time && !gc.retain_since_last_active_time)
    return out;
  const size_t min = static_cast<size_t>(std::max<int64_t>(0, gc.min_non_active_revisions));
  if (revisions.size() <= min) return out;

  std::erase_if(revisions, [](const GcCandidate& r) { return r.active; });
  if (revisions.size() <= min) return out;

  std::stable_sort(revisions.begin(), revisions.end(), [](const GcCandidate& a, const GcCandidate& b) {
    if (a.last_active != b.last_active) return a.last_active < b.last_active;
    return a.name < b.name;
  });

  size_t remaining = revisions.size();
  std::vector<const GcCandidate*> non_stale;
  for (const GcCandidate& rev : revisions) {
    if (remaining <= min) return out;
    if (isStale(gc, rev, now)) {
      out.push_back(rev.name);
      --remaining;
    } else {
      non_stale.push_back(&rev);
    }
  }

  if (!gc.max_non_active_revisions) return out;
  const size_t max = static_cast<size_t>(std::max<int64_t>(0, *gc.max_non_active_revisions));
  if (non_stale.size() <= max) return out;
  for (size_t i = 0; i < non_stale.size() - max; ++i) out.push_back(non_stale[i]->name);
  return out;
}

}  // namespace knap::controller
