// Aligned text tables for the CLI's listings (`ddpx models`, --show_recommendations): every
// column as wide as its widest cell, whatever the names' lengths.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

namespace ddpx::cli {

// One line per row, cells split by one space; columns whose `right[i]` is true are right-aligned
// (numbers). The last column is not padded and no line ends in spaces.
inline std::vector<std::string> align_columns(const std::vector<std::vector<std::string>>& rows,
                                              const std::vector<bool>& right) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()), 0);
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::vector<std::string> lines;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      std::string pad(width[i] - row[i].size(), ' ');
      bool last = i + 1 == row.size();
      if (i > 0) line += ' ';
      line += i < right.size() && right[i] ? pad + row[i] : row[i] + (last ? "" : pad);
    }
    line.erase(line.find_last_not_of(' ') + 1);
    lines.push_back(line);
  }
  return lines;
}

}  // namespace ddpx::cli
