#include "serve/backup.h"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>

#include "core/error.h"
#include "serve/auth.h"
#include "serve/job_files.h"

namespace ddpx::serve {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "ddpx-backup";
constexpr int kVersion = 1;
constexpr const char* kManifest = "manifest.json";

// The only paths a backup may hold besides the manifest.
bool allowed_path(const std::string& path) {
  static const std::regex other(R"(^(logs/rank\d{1,6}\.log|metrics\.json)$)");
  const std::string prefix = "checkpoints/";
  if (path.rfind(prefix, 0) == 0) {  // NAME, or NAME/PART of a checkpoint written by parts
    const std::string rest = path.substr(prefix.size());
    const size_t slash = rest.find('/');
    if (slash == std::string::npos) return is_checkpoint_name(rest);
    return is_checkpoint_name(rest.substr(0, slash)) &&
           is_checkpoint_part_name(rest.substr(slash + 1));
  }
  return std::regex_match(path, other);
}

constexpr size_t kPiece = 1 << 16;

// libarchive's write callback: the sink the archive streams into.
struct SinkState {
  const std::function<bool(const char*, size_t)>* sink;
  bool stopped = false;  // the reader went away
};

la_ssize_t send_to_sink(struct archive*, void* state, const void* data, size_t n) {
  auto* s = static_cast<SinkState*>(state);
  if (!(*s->sink)(static_cast<const char*>(data), n)) {
    s->stopped = true;
    return -1;
  }
  return static_cast<la_ssize_t>(n);
}

// Reads all of `fd` from its start in pieces, handing each to `use`; throws kIo naming `path`.
template <typename F>
void read_pieces(int fd, const std::string& path, F use) {
  DDPX_CHECK(::lseek(fd, 0, SEEK_SET) == 0, ErrorKind::kIo, "backup: cannot read {}: {}", path,
             std::strerror(errno));
  char buffer[kPiece];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    DDPX_CHECK(n >= 0, ErrorKind::kIo, "backup: cannot read {}: {}", path, std::strerror(errno));
    if (n == 0) return;
    use(buffer, static_cast<size_t>(n));
  }
}

using ArchivePtr = std::unique_ptr<struct archive, int (*)(struct archive*)>;

void write_header(struct archive* a, const std::string& path, uint64_t size) {
  std::unique_ptr<archive_entry, void (*)(archive_entry*)> entry(archive_entry_new(),
                                                                 archive_entry_free);
  archive_entry_set_pathname(entry.get(), path.c_str());
  archive_entry_set_size(entry.get(), static_cast<la_int64_t>(size));
  archive_entry_set_filetype(entry.get(), AE_IFREG);
  archive_entry_set_perm(entry.get(), 0644);
  archive_entry_set_mtime(entry.get(), std::time(nullptr), 0);
  DDPX_CHECK(archive_write_header(a, entry.get()) == ARCHIVE_OK, ErrorKind::kIo,
             "backup: cannot write {}: {}", path, archive_error_string(a));
}

// Writes a piece of an entry's data; false when the reader went away.
bool write_data(struct archive* a, const SinkState& state, const std::string& path,
                const char* data, size_t n) {
  if (archive_write_data(a, data, n) == static_cast<la_ssize_t>(n)) return true;
  DDPX_CHECK(state.stopped, ErrorKind::kIo, "backup: cannot write {}: {}", path,
             archive_error_string(a));
  return false;
}

}  // namespace

BackupWriter::BackupWriter(const Job& job, const std::vector<std::string>& checkpoints,
                           const std::string& log_dir, const json& metrics) {
  namespace fs = std::filesystem;
  auto add_file = [&](const std::string& archive_path, const std::string& file) {
    int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
    DDPX_CHECK(fd >= 0, ErrorKind::kIo, "backup: cannot read {}: {}", file, std::strerror(errno));
    files_.push_back(File{archive_path, fd, "", 0});
  };
  for (const std::string& c : checkpoints) {
    for (const auto& [name, file] : checkpoint_files(c)) add_file("checkpoints/" + name, file);
  }
  for (int rank = 0; !log_dir.empty() && rank < job.workers; ++rank) {
    std::string log = fmt::format("{}/rank{}.log", log_dir, rank);
    if (fs::exists(log)) add_file(fmt::format("logs/rank{}.log", rank), log);
  }
  files_.push_back(File{"metrics.json", -1, metrics.dump(1), 0});

  // Hash each file as it is now; a log that grows meanwhile is sent as it was here.
  json listed = json::array();
  for (File& f : files_) {
    Sha256 sha;
    if (f.fd < 0) {
      sha.update(f.data.data(), f.data.size());
      f.bytes = f.data.size();
    } else {
      read_pieces(f.fd, f.path, [&](const char* data, size_t n) {
        sha.update(data, n);
        f.bytes += n;
      });
    }
    listed.push_back({{"path", f.path}, {"bytes", f.bytes}, {"sha256", sha.hex()}});
  }
  json manifest = {
      {"format", kFormat},
      {"version", kVersion},
      {"created", std::time(nullptr)},
      {"job",
       {{"id", job.id},
        {"user", job.user},
        {"command", job.command},
        {"workers", job.workers},
        {"nodes", job.nodes},
        {"ports", job.extra_ports},
        {"state", job_state_name(job.state)},
        {"exit_code", job.state == JobState::kEnded ? json(job.exit_code) : json(nullptr)},
        {"submitted", job.submitted},
        {"started", job.started},
        {"ended", job.ended}}},
      {"files", listed}};
  manifest_ = manifest.dump(1);
}

BackupWriter::~BackupWriter() {
  for (const File& f : files_)
    if (f.fd >= 0) ::close(f.fd);
}

bool BackupWriter::write(const std::function<bool(const char*, size_t)>& sink) const {
  SinkState state{&sink};
  ArchivePtr a(archive_write_new(), archive_write_free);
  // One block per write: pieces go to the reader as they are made, not held back to 10 KiB.
  DDPX_CHECK(archive_write_add_filter_gzip(a.get()) == ARCHIVE_OK &&
                 archive_write_set_format_pax_restricted(a.get()) == ARCHIVE_OK &&
                 archive_write_set_bytes_in_last_block(a.get(), 1) == ARCHIVE_OK &&
                 archive_write_open(a.get(), &state, nullptr, send_to_sink, nullptr) == ARCHIVE_OK,
             ErrorKind::kIo, "backup: cannot start the archive: {}", archive_error_string(a.get()));
  // The manifest first: a reader checks every file against it.
  write_header(a.get(), kManifest, manifest_.size());
  if (!write_data(a.get(), state, kManifest, manifest_.data(), manifest_.size())) return false;
  for (const File& f : files_) {
    write_header(a.get(), f.path, f.bytes);
    if (f.fd < 0) {
      if (!write_data(a.get(), state, f.path, f.data.data(), f.data.size())) return false;
      continue;
    }
    // Exactly the bytes hashed: a log that grew since is cut where it was.
    uint64_t left = f.bytes;
    bool open = true;
    read_pieces(f.fd, f.path, [&](const char* data, size_t n) {
      size_t take = static_cast<size_t>(std::min<uint64_t>(n, left));
      if (open && take > 0) open = write_data(a.get(), state, f.path, data, take);
      left -= take;
    });
    if (!open) return false;
    DDPX_CHECK(left == 0, ErrorKind::kIo, "backup: {} shrank while it was sent", f.path);
  }
  DDPX_CHECK(archive_write_close(a.get()) == ARCHIVE_OK || state.stopped, ErrorKind::kIo,
             "backup: cannot finish the archive: {}", archive_error_string(a.get()));
  return !state.stopped;
}

Backup read_backup(const std::string& archive_path, const std::string& name,
                   const std::string& dir) {
  namespace fs = std::filesystem;
  constexpr ErrorKind bad = ErrorKind::kUsage;
  ArchivePtr a(archive_read_new(), archive_read_free);
  archive_read_support_filter_gzip(a.get());
  archive_read_support_format_tar(a.get());
  DDPX_CHECK(archive_read_open_filename(a.get(), archive_path.c_str(), kPiece) == ARCHIVE_OK, bad,
             "{}: not a .tar.gz backup ({}); make one with GET /api/v1/jobs/ID/backup", name,
             archive_error_string(a.get()));

  json manifest;
  std::map<std::string, json> expected;  // path -> {bytes, sha256}
  Backup backup;
  archive_entry* entry = nullptr;
  for (int r; (r = archive_read_next_header(a.get(), &entry)) != ARCHIVE_EOF;) {
    DDPX_CHECK(r == ARCHIVE_OK, bad, "{}: damaged archive: {}", name,
               archive_error_string(a.get()));
    std::string path = archive_entry_pathname(entry) ? archive_entry_pathname(entry) : "";
    // tar writes its folders too: the two a backup has, and checkpoint folders, carry nothing.
    if (archive_entry_filetype(entry) == AE_IFDIR) {
      std::string folder = path;
      if (!folder.empty() && folder.back() == '/') folder.pop_back();
      if (folder == "checkpoints" || folder == "logs" ||
          (folder.rfind("checkpoints/", 0) == 0 && is_checkpoint_name(folder.substr(12))))
        continue;
    }
    DDPX_CHECK(archive_entry_filetype(entry) == AE_IFREG, bad,
               "{}: '{}' is not a regular file; a backup holds only files", name, path);
    if (manifest.is_null()) {
      DDPX_CHECK(path == kManifest, bad, "{}: its first entry is '{}', not {}", name, path,
                 kManifest);
      DDPX_CHECK(archive_entry_size(entry) < (1 << 20), bad, "{}: {} is over 1 MiB", name,
                 kManifest);
      std::string text(static_cast<size_t>(archive_entry_size(entry)), '\0');
      DDPX_CHECK(archive_read_data(a.get(), text.data(), text.size()) ==
                     static_cast<la_ssize_t>(text.size()),
                 bad, "{}: cannot read {}", name, kManifest);
      manifest = json::parse(text, nullptr, false);
      DDPX_CHECK(manifest.is_object() && manifest.value("format", "") == kFormat, bad,
                 "{}: {} is not a ddpx backup manifest", name, kManifest);
      DDPX_CHECK(manifest.value("version", 0) == kVersion, bad,
                 "{}: backup version {}, this ddpx reads {}", name, manifest.value("version", 0),
                 kVersion);
      DDPX_CHECK(manifest.contains("files") && manifest["files"].is_array() &&
                     manifest.contains("job") && manifest["job"].is_object(),
                 bad, "{}: {} lacks its job or files", name, kManifest);
      for (const json& f : manifest["files"]) {
        DDPX_CHECK(f.is_object() && f.value("path", json()).is_string() &&
                       f.value("bytes", json()).is_number_unsigned() &&
                       f.value("sha256", json()).is_string(),
                   bad, "{}: a file entry of {} lacks path, bytes or sha256", name, kManifest);
        std::string p = f["path"];
        DDPX_CHECK(allowed_path(p), bad,
                   "{}: the manifest lists '{}', which a backup may not hold (checkpoints/, logs/, "
                   "metrics.json only)",
                   name, p);
        expected[p] = f;
      }
      continue;
    }
    auto it = expected.find(path);
    DDPX_CHECK(it != expected.end(), bad, "{}: '{}' is not listed in its manifest", name, path);
    uint64_t size = it->second["bytes"];
    DDPX_CHECK(archive_entry_size(entry) == static_cast<la_int64_t>(size), bad,
               "{}: {} has {} bytes, the manifest says {}", name, path, archive_entry_size(entry),
               size);
    fs::path target = fs::path(dir) / path;
    fs::create_directories(target.parent_path());
    std::ofstream out(target, std::ios::binary);
    DDPX_CHECK(out, ErrorKind::kIo, "cannot write {}", target.string());
    Sha256 sha;
    char buffer[kPiece];
    uint64_t got = 0;
    for (la_ssize_t n; (n = archive_read_data(a.get(), buffer, sizeof(buffer))) != 0;) {
      DDPX_CHECK(n > 0, bad, "{}: damaged data in {}: {}", name, path,
                 archive_error_string(a.get()));
      out.write(buffer, n);
      sha.update(buffer, static_cast<size_t>(n));
      got += static_cast<uint64_t>(n);
    }
    DDPX_CHECK(got == size && sha.hex() == it->second["sha256"].get<std::string>(), bad,
               "{}: {} does not match its SHA-256 in the manifest (damaged in transit?)", name,
               path);
    out.close();
    DDPX_CHECK(out, ErrorKind::kIo, "cannot write {}", target.string());
    if (path.rfind("checkpoints/", 0) == 0) {  // the checkpoint: the file, or its parts' folder
      const std::string rest = path.substr(12);
      const std::string checkpoint =
          (fs::path(dir) / "checkpoints" / rest.substr(0, rest.find('/'))).string();
      if (std::find(backup.checkpoints.begin(), backup.checkpoints.end(), checkpoint) ==
          backup.checkpoints.end())
        backup.checkpoints.push_back(checkpoint);
    }
    expected.erase(it);
  }
  DDPX_CHECK(!manifest.is_null(), bad, "{}: an empty archive, not a backup", name);
  DDPX_CHECK(expected.empty(), bad, "{}: {} is listed in the manifest but missing", name,
             expected.empty() ? "" : expected.begin()->first);

  const json& job = manifest["job"];
  backup.job = job;
  DDPX_CHECK(job.contains("command") && job["command"].is_array() && !job["command"].empty(), bad,
             "{}: the manifest's job has no command", name);
  for (const json& word : job["command"]) {
    DDPX_CHECK(word.is_string(), bad, "{}: the manifest's command holds a non-string", name);
    backup.command.push_back(word.get<std::string>());
  }
  DDPX_CHECK(job.value("workers", json()).is_number_integer() &&
                 job.value("ports", json()).is_number_integer(),
             bad, "{}: the manifest's job lacks workers or ports", name);
  backup.workers = job["workers"];
  DDPX_CHECK(!job.contains("nodes") || job["nodes"].is_number_integer(), bad,
             "{}: the manifest's job has nodes that is not an integer", name);
  backup.nodes = job.value("nodes", 1);
  backup.extra_ports = job["ports"];
  return backup;
}

}  // namespace ddpx::serve
