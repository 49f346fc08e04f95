// Plain-text tables for the CLI: left-aligned columns, two spaces apart.
#pragma once

#include <string>
#include <vector>

namespace trainq {

class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  bool empty() const { return rows_.size() <= 1; }
  // Every line is prefixed by `indent` and ends with '\n'.
  std::string Render(const std::string& indent = "") const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace trainq
