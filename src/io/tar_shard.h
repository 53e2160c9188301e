// Tar shards in WebDataset's layout (a sample is the members sharing a key: `000017.jpg` and
// `000017.cls`), written and listed through libarchive. A shard is an uncompressed tar (images
// are compressed already), so that a sample's bytes can be read in place with one pread: listing
// records where each member's data starts. Only regular files are samples' members; folders are
// passed over; links, devices, sparse files and compressed tars are refused, and so is a member
// whose data runs past the end of the file (a shard cut short). Writing goes to a temporary
// file, flushed and renamed into place, so a shard is whole or absent.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

struct archive;  // libarchive's

namespace ddpx::io {

struct TarMember {
  std::string name;    // the path inside the tar
  int64_t offset = 0;  // where its data starts in the tar
  int64_t size = 0;
  std::string data;  // the bytes themselves when size <= kTarInlineBytes (a label), else empty
};

// Members this small are read while listing (a `.cls` label is a few digits).
constexpr int64_t kTarInlineBytes = 64;

// The members of the tar at `path`, in order; throws kData naming the file and the reason.
std::vector<TarMember> list_tar(const std::string& path);
// The same for a tar in memory (the fuzz entry point); `source` names it in errors.
std::vector<TarMember> list_tar_bytes(std::string_view bytes, const std::string& source);

// `size` bytes at `offset` of `path` (a member's data); throws kData when the file is shorter.
std::string read_tar_member(const std::string& path, int64_t offset, int64_t size);

// Writes a tar member by member; finish() renames it into place. Destroyed unfinished, it
// leaves nothing behind.
class TarWriter {
 public:
  explicit TarWriter(std::string path);
  ~TarWriter();
  TarWriter(const TarWriter&) = delete;
  TarWriter& operator=(const TarWriter&) = delete;

  void add(const std::string& name, std::string_view bytes);
  int64_t bytes() const { return bytes_; }  // written so far, headers and padding included
  void finish();

 private:
  std::string path_, temp_;
  ::archive* archive_ = nullptr;
  int fd_ = -1;
  int64_t bytes_ = 0;
};

}  // namespace ddpx::io
