#include "router/fields.h"

#include <algorithm>
#include <cstring>

#include <boost/beast/core/string.hpp>

namespace knap::router {

namespace {

bool iequals(std::string_view a, std::string_view b) {
  return boost::beast::iequals(boost::beast::string_view(a.data(), a.size()),
                               boost::beast::string_view(b.data(), b.size()));
}

// Overflow blocks: at least this big, or as big as the one string.
constexpr size_t kBlockBytes = 2048;

}  // namespace

Fields& Fields::operator=(const Fields& other) {
  if (this == &other) return *this;
  clear();
  for (const Field& f : other.entries_) insert(f.id_, f.name_, f.value_);
  return *this;
}

std::string_view Fields::store(std::string_view s) {
  if (s.empty()) return {};
  char* at;
  if (blocks_.empty() && inline_used_ + s.size() <= kInlineBytes) {
    at = inline_ + inline_used_;
    inline_used_ += s.size();
  } else {
    if (blocks_.empty() || block_used_ + s.size() > block_size_) {
      block_size_ = std::max(kBlockBytes, s.size());
      blocks_.push_back(std::make_unique<char[]>(block_size_));
      block_used_ = 0;
    }
    at = blocks_.back().get() + block_used_;
    block_used_ += s.size();
  }
  std::memcpy(at, s.data(), s.size());
  return {at, s.size()};
}

void Fields::insert(http::field id, std::string_view name, std::string_view value) {
  Field f;
  f.id_ = id;
  f.name_ = store(name);
  f.value_ = store(value);
  entries_.push_back(f);
}

void Fields::insert(std::string_view name, std::string_view value) {
  insert(http::string_to_field(boost::beast::string_view(name.data(), name.size())), name, value);
}

void Fields::insert(http::field id, std::string_view value) {
  const auto name = http::to_string(id);
  // A known field's name is a static string: no copy needed.
  Field f;
  f.id_ = id;
  f.name_ = std::string_view(name.data(), name.size());
  f.value_ = store(value);
  entries_.push_back(f);
}

void Fields::set(http::field id, std::string_view value) {
  // (The value may view a field about to go: stored before the erase.)
  const std::string_view kept = store(value);
  entries_.erase(
      std::remove_if(entries_.begin(), entries_.end(), [id](const Field& f) { return f.id_ == id; }),
      entries_.end());
  const auto name = http::to_string(id);
  Field f;
  f.id_ = id;
  f.name_ = std::string_view(name.data(), name.size());
  f.value_ = kept;
  entries_.push_back(f);
}

Fields::iterator Fields::find(http::field id) {
  return std::find_if(entries_.begin(), entries_.end(), [id](const Field& f) { return f.id_ == id; });
}
Fields::const_iterator Fields::find(http::field id) const {
  return std::find_if(entries_.begin(), entries_.end(), [id](const Field& f) { return f.id_ == id; });
}
Fields::iterator Fields::find(std::string_view name) {
  return std::find_if(entries_.begin(), entries_.end(),
                      [name](const Field& f) { return iequals(f.name_, name); });
}
Fields::const_iterator Fields::find(std::string_view name) const {
  return std::find_if(entries_.begin(), entries_.end(),
                      [name](const Field& f) { return iequals(f.name_, name); });
}

std::string_view Fields::operator[](std::string_view name) const {
  auto it = find(name);
  return it == end() ? std::string_view() : it->value_;
}

size_t Fields::erase(std::string_view name) {
  const size_t before = entries_.size();
  entries_.erase(std::remove_if(entries_.begin(), entries_.end(),
                                [name](const Field& f) { return iequals(f.name_, name); }),
                 entries_.end());
  return before - entries_.size();
}

void Fields::clear() {
  entries_.clear();
  inline_used_ = 0;
  blocks_.clear();
  block_used_ = block_size_ = 0;
}

}  // namespace knap::router
