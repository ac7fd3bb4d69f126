// Fields: the header fields of one HTTP message, flat, for the router.
//
// Why not beast::http::fields: it allocates a node per field and keeps them
// in a set ordered by case-insensitive name, so every insert is an
// allocation plus a tree walk of string compares, and set() is an erase
// and an insert. On the proxy path that was a large share of the
// allocations per request. Here the fields are a small vector of entries
// (on the stack or in the coroutine frame for ordinary heads) whose names
// and values live in an arena: a block inside the object, then blocks of
// its own that are never moved. So:
//  - inserting copies the bytes once and allocates nothing for a head that
//    fits the inline block (kInlineBytes);
//  - views returned by name() / value() stay valid until clear() or the
//    Fields is destroyed, across later inserts and erases, as beast's do;
//  - order is the order of insertion (what the router writes out);
//  - lookups are linear: a head holds tens of fields, and the router looks
//    up a handful per message (a hostile head of thousands is bounded by
//    the head size limit, and each lookup is one pass).
//
// Thread safety: a value type; one owner at a time.
#pragma once

#include <cstddef>
#include <memory>
#include <string_view>
#include <vector>

#include <boost/beast/http/field.hpp>
#include <boost/container/small_vector.hpp>

namespace knap::router {

namespace http = boost::beast::http;

class Fields {
 public:
  // One field line. `id` is http::field::unknown for names beast does not
  // know; `name` keeps the spelling received.
  class Field {
   public:
    http::field name() const { return id_; }
    std::string_view name_string() const { return name_; }
    std::string_view value() const { return value_; }

   private:
    friend class Fields;
    http::field id_ = http::field::unknown;
    std::string_view name_, value_;
  };
  using Entries = boost::container::small_vector<Field, 16>;
  using iterator = Entries::iterator;
  using const_iterator = Entries::const_iterator;

  Fields() = default;
  Fields(const Fields& other) { *this = other; }
  Fields& operator=(const Fields& other);
  Fields(Fields&& other) { *this = other; }  // views point into `other`: copied, not stolen
  Fields& operator=(Fields&& other) { return *this = static_cast<const Fields&>(other); }

  iterator begin() { return entries_.begin(); }
  iterator end() { return entries_.end(); }
  const_iterator begin() const { return entries_.begin(); }
  const_iterator end() const { return entries_.end(); }
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }

  // The first field with this id / name (names compare case-insensitively).
  iterator find(http::field id);
  const_iterator find(http::field id) const;
  iterator find(std::string_view name);
  const_iterator find(std::string_view name) const;
  // The first value of `name`, "" when absent.
  std::string_view operator[](std::string_view name) const;

  // Appends a field; `id` must be string_to_field(name) (the parsers know
  // it already). The value may be a view into this Fields.
  void insert(http::field id, std::string_view name, std::string_view value);
  void insert(std::string_view name, std::string_view value);
  void insert(http::field id, std::string_view value);  // the name as beast spells it
  // Replaces every field with this id by one field.
  void set(http::field id, std::string_view value);

  // Removes one field; returns the position of the next. Moves every later
  // field: to remove many, use erase_if (one pass), not this in a loop.
  iterator erase(iterator it) { return entries_.erase(it); }
  // Removes every field for which pred(const Field&) is true, in one pass;
  // pred sees each field once, in order (it may note what it sees: views
  // into names and values stay valid). Returns how many were removed.
  template <class Pred>
  size_t erase_if(Pred pred) {
    auto out = entries_.begin();
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (pred(static_cast<const Field&>(*it))) continue;
      if (out != it) *out = *it;
      ++out;
    }
    const size_t removed = static_cast<size_t>(entries_.end() - out);
    entries_.erase(out, entries_.end());
    return removed;
  }
  // Removes every field called `name`; returns how many.
  size_t erase(std::string_view name);
  // Removes everything; earlier views are no longer valid.
  void clear();

  // Bytes of the inline arena block.
  static constexpr size_t kInlineBytes = 512;

 private:
  // A copy of `s` in the arena (stable until clear()).
  std::string_view store(std::string_view s);

  Entries entries_;
  char inline_[kInlineBytes];
  size_t inline_used_ = 0;
  // Blocks past the inline one; the last one is being filled.
  std::vector<std::unique_ptr<char[]>> blocks_;
  size_t block_used_ = 0, block_size_ = 0;
};

}  // namespace knap::router
