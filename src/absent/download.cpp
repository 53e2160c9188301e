// `ddpx data download` in a -DDDPX_GPU_CHECK=ON build (see absent.h): no libcurl here.
#include "data/download.h"

#include "absent/absent.h"

namespace ddpx::data {
namespace {

constexpr const char* kWhat = "`ddpx data download` (libcurl)";
constexpr const char* kInstead =
    "download with a full build (scripts/build) and copy the files into --data_dir";

}  // namespace

std::vector<RemoteFile> remote_files(const std::string&) { absent::not_built(kWhat, kInstead); }
std::string download_dataset(const std::string&, const DownloadOptions&) {
  absent::not_built(kWhat, kInstead);
}
void fetch_file(const RemoteFile&, const std::string&, const DownloadOptions&) {
  absent::not_built(kWhat, kInstead);
}
std::string md5_file(const std::string&) { absent::not_built(kWhat, kInstead); }

}  // namespace ddpx::data
