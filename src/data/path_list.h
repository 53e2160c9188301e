// Many file paths held compactly: one character buffer and a uint32 offset a path, all below one
// prefix (an image folder's root, stored once), so that the index of a 100k-image folder costs
// a few bytes a file instead of a std::string each (a heap block, and the root repeated in
// every one). Element access builds the full path as a new string; relative() is a view.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ddpx::data {

class PathList {
 public:
  // Paths below `root` (empty: paths kept as given, e.g. shard files or URLs).
  explicit PathList(std::string root = "") : root_(std::move(root)) {}

  // Appends `relative`: the path root/relative (relative as given when root is empty). Throws
  // kData past 4 GiB of names.
  void push_back(std::string_view relative);
  void reserve(size_t count, size_t chars);
  void shrink_to_fit();

  size_t size() const { return ends_.size(); }
  bool empty() const { return ends_.empty(); }
  const std::string& root() const { return root_; }
  std::string_view relative(size_t i) const {
    const uint32_t begin = i == 0 ? 0 : ends_[i - 1];
    return std::string_view(chars_).substr(begin, ends_[i] - begin);
  }
  std::string operator[](size_t i) const;  // the full path
  std::vector<std::string> to_vector() const;
  bool operator==(const PathList& other) const { return to_vector() == other.to_vector(); }

 private:
  std::string root_;
  std::string chars_;           // every relative path, one after the other
  std::vector<uint32_t> ends_;  // path i ends at ends_[i]
};

}  // namespace ddpx::data
