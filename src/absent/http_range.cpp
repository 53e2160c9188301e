// `--data_url` in a -DDDPX_GPU_CHECK=ON build (see absent.h): no libcurl here.
#include "data/http_range.h"

#include "absent/absent.h"

namespace ddpx::data {
namespace {

constexpr const char* kWhat = "`--data_url` (libcurl)";
constexpr const char* kInstead =
    "train from a full build (scripts/build), or copy the shards "
    "and give --data_dir";

}  // namespace

long http_stall_seconds() { return kHttpStallSeconds; }
bool is_url(const std::string& path) {
  return path.rfind("http://", 0) == 0 || path.rfind("https://", 0) == 0;
}
std::optional<std::string> http_get(const std::string&, bool) {
  absent::not_built(kWhat, kInstead);
}
std::string http_read_range(const std::string&, int64_t, int64_t) {
  absent::not_built(kWhat, kInstead);
}

}  // namespace ddpx::data
