#include "io/archive.h"

#include <archive.h>
#include <archive_entry.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <set>

#include "core/error.h"

namespace ddpx::io {
namespace {

namespace fs = std::filesystem;

// A relative path with no `..`, or empty when the entry must be refused.
fs::path safe_relative(const char* name) {
  if (name == nullptr || *name == '\0') return {};
  fs::path path = fs::path(name).lexically_normal();
  if (path.is_absolute() || path.has_root_name()) return {};
  for (const auto& part : path)
    if (part == "..") return {};
  if (path == "." || path.empty()) return {};
  return path;
}

// libarchive's last error; it can be NULL (an archive it cannot open and has no words for),
// which fmt would refuse with an exception of its own.
const char* why(struct archive* reader) {
  const char* text = archive_error_string(reader);
  return text != nullptr ? text : "no reason given";
}

using Reader = std::unique_ptr<struct archive, int (*)(struct archive*)>;

Reader new_reader() {
  Reader reader(archive_read_new(), archive_read_free);
  archive_read_support_filter_all(reader.get());
  archive_read_support_format_all(reader.get());
  return reader;
}

// Reads every entry of an opened archive into dest_dir; `archive_path` names it in errors.
void unpack(struct archive* reader, const std::string& archive_path, const std::string& dest_dir,
            int64_t max_bytes) {
  int64_t written = 0;
  fs::create_directories(dest_dir);
  fs::path staging = fs::path(dest_dir) / fmt::format(".extract-{}", ::getpid());
  fs::remove_all(staging);
  fs::create_directories(staging);
  std::set<fs::path> top_level;
  try {
    struct archive_entry* entry = nullptr;
    while (true) {
      int rc = archive_read_next_header(reader, &entry);
      if (rc == ARCHIVE_EOF) break;
      if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN)
        fail(ErrorKind::kData, "{}: corrupt archive ({}); delete it and download it again",
             archive_path, why(reader));
      const char* name = archive_entry_pathname(entry);
      if (name && fs::path(name).lexically_normal() == ".") continue;  // a "./" entry
      fs::path rel = safe_relative(name);
      DDPX_CHECK(!rel.empty(), ErrorKind::kData,
                 "{}: refusing entry '{}' (absolute or `..` path); the archive is not an official "
                 "dataset archive",
                 archive_path, name ? name : "");
      auto type = archive_entry_filetype(entry);
      fs::path target = staging / rel;
      top_level.insert(*rel.begin());
      if (type == AE_IFDIR) {
        fs::create_directories(target);
        continue;
      }
      DDPX_CHECK(type == AE_IFREG, ErrorKind::kData,
                 "{}: refusing entry '{}' (a link or special file); the archive is not an "
                 "official dataset archive",
                 archive_path, name);
      fs::create_directories(target.parent_path());
      std::ofstream out(target, std::ios::binary | std::ios::trunc);
      DDPX_CHECK(out.good(), ErrorKind::kIo, "cannot write {}", target.string());
      char buffer[1 << 16];
      while (true) {
        la_ssize_t n = archive_read_data(reader, buffer, sizeof(buffer));
        if (n == 0) break;
        if (n < 0)
          fail(ErrorKind::kData,
               "{}: corrupt archive while reading '{}' ({}); delete it and "
               "download it again",
               archive_path, name, why(reader));
        written += n;
        DDPX_CHECK(written <= max_bytes, ErrorKind::kData,
                   "{}: unpacks to more than {} bytes; the archive is not an official dataset "
                   "archive, delete it and download it again",
                   archive_path, max_bytes);
        out.write(buffer, n);
      }
      out.close();
      DDPX_CHECK(out.good(), ErrorKind::kIo, "writing {} failed (disk full?)", target.string());
    }
    for (const fs::path& entry : top_level) {
      fs::path final_path = fs::path(dest_dir) / entry;
      fs::remove_all(final_path);
      fs::rename(staging / entry, final_path);
    }
    fs::remove_all(staging);
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(staging, ignored);
    throw;
  }
}

// unpack, with the file system's refusals (a name too long, a file where the archive wants a
// folder, a destination not writable) as one ddpx error instead of std::filesystem's.
void extract_from(struct archive* reader, const std::string& archive_path,
                  const std::string& dest_dir, int64_t max_bytes) {
  try {
    unpack(reader, archive_path, dest_dir, max_bytes);
  } catch (const fs::filesystem_error& e) {
    fail(ErrorKind::kData,
         "{}: cannot unpack it into {} ({}); delete the archive and download it again, or check "
         "that {} is writable",
         archive_path, dest_dir, e.code().message(), dest_dir);
  }
}

}  // namespace

void extract_archive(const std::string& archive_path, const std::string& dest_dir) {
  Reader reader = new_reader();
  if (archive_read_open_filename(reader.get(), archive_path.c_str(), 1 << 16) != ARCHIVE_OK)
    fail(ErrorKind::kData, "cannot open archive {}: {}", archive_path, why(reader.get()));
  extract_from(reader.get(), archive_path, dest_dir, kMaxExtractedBytes);
}

void extract_archive_bytes(std::string_view bytes, const std::string& source,
                           const std::string& dest_dir, int64_t max_bytes) {
  Reader reader = new_reader();
  if (archive_read_open_memory(reader.get(), bytes.data(), bytes.size()) != ARCHIVE_OK)
    fail(ErrorKind::kData, "cannot open archive {}: {}", source, why(reader.get()));
  extract_from(reader.get(), source, dest_dir, max_bytes);
}

}  // namespace ddpx::io
