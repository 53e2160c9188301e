// Tar shards in a -DDDPX_GPU_CHECK=ON build (see absent.h): no libarchive here.
#include "io/tar_shard.h"

#include "absent/absent.h"

namespace ddpx::io {
namespace {

[[noreturn]] void no_tar() {
  absent::not_built("reading and writing tar shards (--dataset shards, `ddpx data pack`)",
                    "train on the image folder itself (--dataset imagefolder), or use a full "
                    "build (scripts/build)");
}

}  // namespace

std::vector<TarMember> list_tar(const std::string&) { no_tar(); }
std::vector<TarMember> list_tar_bytes(std::string_view, const std::string&) { no_tar(); }
std::string read_tar_member(const std::string&, int64_t, int64_t) { no_tar(); }
TarWriter::TarWriter(std::string path) : path_(std::move(path)) { no_tar(); }
TarWriter::~TarWriter() = default;
void TarWriter::add(const std::string&, std::string_view) { no_tar(); }
void TarWriter::finish() { no_tar(); }

}  // namespace ddpx::io
