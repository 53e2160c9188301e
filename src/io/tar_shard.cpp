#include "io/tar_shard.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace ddpx::io {
namespace {

const char* why(struct archive* a) {
  const char* text = archive_error_string(a);
  return text != nullptr ? text : "no reason given";
}

[[noreturn]] void not_a_tar(struct archive* a, const std::string& source) {
  fail(ErrorKind::kData,
       "{}: not a readable uncompressed tar ({}); ddpx reads WebDataset shards as plain .tar "
       "files: unpack a compressed one (gunzip) or write it again (`ddpx data pack`)",
       source, why(a));
}

using Reader = std::unique_ptr<struct archive, int (*)(struct archive*)>;

Reader new_reader() {
  Reader reader(archive_read_new(), archive_read_free);
  // Tar only, and no decompression filter: a compressed shard cannot be read in place.
  archive_read_support_format_tar(reader.get());
  return reader;
}

// Lists an opened tar of `total` bytes.
std::vector<TarMember> list_members(struct archive* a, const std::string& source, int64_t total) {
  std::vector<TarMember> members;
  struct archive_entry* entry = nullptr;
  while (true) {
    const int rc = archive_read_next_header(a, &entry);
    if (rc == ARCHIVE_EOF) break;
    if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN) not_a_tar(a, source);
    const char* raw = archive_entry_pathname(entry);
    const std::string name = raw != nullptr ? raw : "";
    const auto type = archive_entry_filetype(entry);
    if (type == AE_IFDIR) continue;
    DDPX_CHECK(type == AE_IFREG && archive_entry_sparse_count(entry) == 0, ErrorKind::kData,
               "{}: member '{}' is a link, device or sparse file; a shard holds regular files "
               "only: write it again (`ddpx data pack`)",
               source, name);
    TarMember m;
    m.name = name;
    // After the header (and any pax or GNU long-name records before it) the reader stands at
    // the member's data.
    m.offset = archive_filter_bytes(a, -1);
    m.size = archive_entry_size(entry);
    DDPX_CHECK(m.size >= 0 && m.offset >= 0 && m.offset <= total && m.size <= total - m.offset,
               ErrorKind::kData,
               "{}: member '{}' of {} bytes at {} runs past the end of the file ({} bytes): the "
               "shard was cut short; copy or write it again",
               source, name, m.size, m.offset, total);
    if (m.size <= kTarInlineBytes) {
      m.data.resize(static_cast<size_t>(m.size));
      const la_ssize_t n = archive_read_data(a, m.data.data(), m.data.size());
      DDPX_CHECK(n == static_cast<la_ssize_t>(m.size), ErrorKind::kData,
                 "{}: member '{}' cannot be read ({}); the shard is damaged: write it again",
                 source, name, n < 0 ? why(a) : "short read");
    }
    members.push_back(std::move(m));
  }
  return members;
}

}  // namespace

std::vector<TarMember> list_tar(const std::string& path) {
  struct stat st;
  DDPX_CHECK(stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode), ErrorKind::kData,
             "{}: cannot read it ({}); a shard is a .tar file", path, std::strerror(errno));
  Reader reader = new_reader();
  if (archive_read_open_filename(reader.get(), path.c_str(), 1 << 16) != ARCHIVE_OK)
    not_a_tar(reader.get(), path);
  return list_members(reader.get(), path, st.st_size);
}

std::vector<TarMember> list_tar_bytes(std::string_view bytes, const std::string& source) {
  Reader reader = new_reader();
  if (archive_read_open_memory(reader.get(), bytes.data(), bytes.size()) != ARCHIVE_OK)
    not_a_tar(reader.get(), source);
  return list_members(reader.get(), source, static_cast<int64_t>(bytes.size()));
}

std::string read_tar_member(const std::string& path, int64_t offset, int64_t size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DDPX_CHECK(fd >= 0, ErrorKind::kData, "{}: cannot open it ({}); was the shard moved?", path,
             std::strerror(errno));
  std::string out(static_cast<size_t>(size), '\0');
  int64_t done = 0;
  while (done < size) {
    const ssize_t n =
        ::pread(fd, out.data() + done, static_cast<size_t>(size - done), offset + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      fail(ErrorKind::kData,
           "{}: {} bytes at {} cannot be read ({}); the shard changed since it "
           "was listed, or was cut short: write it again",
           path, size, offset, n < 0 ? std::strerror(err) : "end of file");
    }
    done += n;
  }
  ::close(fd);
  return out;
}

TarWriter::TarWriter(std::string path) : path_(std::move(path)) {
  temp_ = path_ + fmt::format(".tmp-{}", ::getpid());
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  DDPX_CHECK(fd_ >= 0, ErrorKind::kIo, "cannot write {} ({})", temp_, std::strerror(errno));
  archive_ = archive_write_new();
  // pax restricted: plain ustar headers, with pax records only for what ustar cannot hold (a
  // long name); what Python's tarfile and GNU tar write and read.
  if (archive_write_set_format_pax_restricted(archive_) != ARCHIVE_OK ||
      archive_write_set_bytes_in_last_block(archive_, 1) != ARCHIVE_OK ||
      archive_write_open_fd(archive_, fd_) != ARCHIVE_OK) {
    const std::string reason = why(archive_);
    archive_write_free(archive_);
    archive_ = nullptr;
    ::close(fd_);
    ::unlink(temp_.c_str());
    fail(ErrorKind::kIo, "cannot write {} ({})", temp_, reason);
  }
}

TarWriter::~TarWriter() {
  if (archive_ != nullptr) archive_write_free(archive_);
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(temp_.c_str());
  }
}

void TarWriter::add(const std::string& name, std::string_view bytes) {
  std::unique_ptr<struct archive_entry, void (*)(struct archive_entry*)> entry(archive_entry_new(),
                                                                               archive_entry_free);
  archive_entry_set_pathname(entry.get(), name.c_str());
  archive_entry_set_filetype(entry.get(), AE_IFREG);
  archive_entry_set_perm(entry.get(), 0644);
  archive_entry_set_size(entry.get(), static_cast<la_int64_t>(bytes.size()));
  archive_entry_set_mtime(entry.get(), 0, 0);  // the same bytes from the same input
  if (archive_write_header(archive_, entry.get()) != ARCHIVE_OK ||
      archive_write_data(archive_, bytes.data(), bytes.size()) !=
          static_cast<la_ssize_t>(bytes.size()))
    fail(ErrorKind::kIo, "writing {} into {} failed ({}); is the disk full?", name, temp_,
         why(archive_));
  bytes_ += 512 + (static_cast<int64_t>(bytes.size()) + 511) / 512 * 512;
}

void TarWriter::finish() {
  const int rc = archive_write_close(archive_);
  archive_write_free(archive_);
  archive_ = nullptr;
  DDPX_CHECK(rc == ARCHIVE_OK && ::fsync(fd_) == 0, ErrorKind::kIo,
             "writing {} failed; is the disk full?", temp_);
  ::close(fd_);
  fd_ = -1;
  if (std::rename(temp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp_.c_str());
    fail(ErrorKind::kIo, "cannot rename {} to {} ({})", temp_, path_, std::strerror(err));
  }
}

}  // namespace ddpx::io
