// Aligned text tables for the CLI (kn-style: upper-case headers, two spaces
// between columns). Not thread-safe; build, then render.
#pragma once

#include <string>
#include <vector>

namespace knap::cli {

class Table {
 public:
  void header(std::vector<std::string> cells) { rows_.insert(rows_.begin(), std::move(cells)); }
  void row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  std::string render() const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace knap::cli
