// Kubernetes label and field selectors for LIST and WATCH
// (`?labelSelector=app=x,tier in (a,b),!legacy` and
// `?fieldSelector=metadata.name=x`). Parsed once per request, then matched
// against objects. Values; thread-safe after construction.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"

namespace knap::api {

class LabelSelector {
 public:
  enum class Op { kEquals, kNotEquals, kIn, kNotIn, kExists, kDoesNotExist };
  struct Requirement {
    std::string key;
    Op op;
    std::vector<std::string> values;
  };

  // Parses the selector syntax: `k=v`, `k==v`, `k!=v`, `k in (a,b)`,
  // `k notin (a,b)`, `k`, `!k`, comma separated. Empty text matches all.
  // kInvalidArgument with a message naming the bad requirement.
  static StatusOr<LabelSelector> parse(const std::string& text);

  // True if the labels map (a JSON object of strings, or null) satisfies every requirement.
  bool matches(const nlohmann::json& labels) const;
  bool empty() const { return reqs_.empty(); }
  const std::vector<Requirement>& requirements() const { return reqs_; }

 private:
  std::vector<Requirement> reqs_;
};

// Supports metadata.name and metadata.namespace with =, == and != (what
// Kubernetes offers for custom resources), plus the kind's own field labels
// (Events: involvedObject.name, reason, ...), each a dotted path into the object.
class FieldSelector {
 public:
  // kInvalidArgument for unsupported fields ("field label not supported: spec.x").
  // `extra_fields` maps the kind's own field labels to the dotted path in the
  // object each selects on.
  static StatusOr<FieldSelector> parse(const std::string& text,
                                       const std::map<std::string, std::string>& extra_fields = {});
  // `obj` is a full object with metadata.
  bool matches(const nlohmann::json& obj) const;
  bool empty() const { return terms_.empty(); }

 private:
  struct Term {
    std::string field;
    bool negate;
    std::string value;
  };
  std::vector<Term> terms_;
};

}  // namespace knap::api
