// Events over REST, read-only: core/v1 at /api/v1[/namespaces/NS]/events[/NAME]
// and the events.k8s.io/v1 view at /apis/events.k8s.io/v1[/namespaces/NS]/events[/NAME].
// Both read the same stored core/v1 Events (store kind "Event"). LIST takes
// labelSelector, fieldSelector over the Event field labels (what
// `kubectl describe` sends: involvedObject.name,namespace,kind,uid) and
// limit; Events past the retention ttl are hidden even before the recorder
// removes them. A Table Accept gets kubectl's event columns (LAST SEEN, TYPE,
// REASON, OBJECT, MESSAGE). Pure request -> response; thread-safe.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "api/server/rest_handler.h"
#include "common/clock.h"
#include "store/store.h"

namespace knap::api {

// The events.k8s.io group served next to serving.knative.dev.
inline constexpr const char* kEventsGroup = "events.k8s.io";

// nullopt when the path is not an events path.
std::optional<HttpResponse> handleEventsRequest(store::Store& store, const TimeSource& clock, Duration ttl,
                                                const HttpRequest& req, const std::vector<std::string>& segs,
                                                const std::map<std::string, std::string>& query);

// Discovery entries: the "events" resource of /api/v1 and of /apis/events.k8s.io/v1.
nlohmann::json eventsApiResource();

// "5s", "2m30s", "45m", "3h20m", "2d3h", like kubectl's HumanDuration.
std::string humanDuration(Duration d);

}  // namespace knap::api
