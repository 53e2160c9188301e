#include "data/path_list.h"

#include <limits>

#include "core/error.h"

namespace ddpx::data {

void PathList::push_back(std::string_view relative) {
  DDPX_CHECK(chars_.size() + relative.size() <= std::numeric_limits<uint32_t>::max(),
             ErrorKind::kData,
             "{}: more than 4 GiB of file names in one folder index; split the folder (or pack "
             "it into tar shards: `ddpx data pack`)",
             root_);
  chars_.append(relative);
  ends_.push_back(static_cast<uint32_t>(chars_.size()));
}

void PathList::reserve(size_t count, size_t chars) {
  ends_.reserve(count);
  chars_.reserve(chars);
}

void PathList::shrink_to_fit() {
  ends_.shrink_to_fit();
  chars_.shrink_to_fit();
}

std::string PathList::operator[](size_t i) const {
  const std::string_view rel = relative(i);
  if (root_.empty()) return std::string(rel);
  std::string path;
  path.reserve(root_.size() + 1 + rel.size());
  path.append(root_).append(1, '/').append(rel);
  return path;
}

std::vector<std::string> PathList::to_vector() const {
  std::vector<std::string> out;
  out.reserve(size());
  for (size_t i = 0; i < size(); ++i) out.push_back((*this)[i]);
  return out;
}

}  // namespace ddpx::data
