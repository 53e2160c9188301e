#include "serve/backup.h"

#include <archive.h>
#include <archive_entry.h>
#include <fmt/format.h>
#include <openssl/evp.h>

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
  if (path.rfind(prefix, 0) == 0) return is_checkpoint_name(path.substr(prefix.size()));
  return std::regex_match(path, other);
}

std::string read_whole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DDPX_CHECK(in, ErrorKind::kIo, "cannot read {}", path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

la_ssize_t append_to(struct archive*, void* out, const void* data, size_t n) {
  static_cast<std::string*>(out)->append(static_cast<const char*>(data), n);
  return static_cast<la_ssize_t>(n);
}

using ArchivePtr = std::unique_ptr<struct archive, int (*)(struct archive*)>;

void add_entry(struct archive* a, const std::string& path, const std::string& data) {
  std::unique_ptr<archive_entry, void (*)(archive_entry*)> entry(archive_entry_new(),
                                                                 archive_entry_free);
  archive_entry_set_pathname(entry.get(), path.c_str());
  archive_entry_set_size(entry.get(), static_cast<la_int64_t>(data.size()));
  archive_entry_set_filetype(entry.get(), AE_IFREG);
  archive_entry_set_perm(entry.get(), 0644);
  archive_entry_set_mtime(entry.get(), std::time(nullptr), 0);
  DDPX_CHECK(archive_write_header(a, entry.get()) == ARCHIVE_OK, ErrorKind::kIo,
             "backup: cannot write {}: {}", path, archive_error_string(a));
  DDPX_CHECK(
      archive_write_data(a, data.data(), data.size()) == static_cast<la_ssize_t>(data.size()),
      ErrorKind::kIo, "backup: cannot write {}: {}", path, archive_error_string(a));
}

}  // namespace

std::string write_backup(const Job& job, const std::vector<std::string>& checkpoints,
                         const std::string& log_dir, const json& metrics) {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, std::string>> files;  // path in the archive, bytes
  for (const std::string& c : checkpoints)
    files.emplace_back("checkpoints/" + fs::path(c).filename().string(), read_whole(c));
  for (int rank = 0; !log_dir.empty() && rank < job.workers; ++rank) {
    std::string log = fmt::format("{}/rank{}.log", log_dir, rank);
    if (fs::exists(log)) files.emplace_back(fmt::format("logs/rank{}.log", rank), read_whole(log));
  }
  files.emplace_back("metrics.json", metrics.dump(1));

  json listed = json::array();
  for (const auto& [path, data] : files)
    listed.push_back({{"path", path}, {"bytes", data.size()}, {"sha256", sha256_hex(data)}});
  json manifest = {
      {"format", kFormat},
      {"version", kVersion},
      {"created", std::time(nullptr)},
      {"job",
       {{"id", job.id},
        {"user", job.user},
        {"command", job.command},
        {"workers", job.workers},
        {"ports", job.extra_ports},
        {"state", job_state_name(job.state)},
        {"exit_code", job.state == JobState::kEnded ? json(job.exit_code) : json(nullptr)},
        {"submitted", job.submitted},
        {"started", job.started},
        {"ended", job.ended}}},
      {"files", listed}};

  std::string out;
  ArchivePtr a(archive_write_new(), archive_write_free);
  DDPX_CHECK(archive_write_add_filter_gzip(a.get()) == ARCHIVE_OK &&
                 archive_write_set_format_pax_restricted(a.get()) == ARCHIVE_OK &&
                 archive_write_open(a.get(), &out, nullptr, append_to, nullptr) == ARCHIVE_OK,
             ErrorKind::kIo, "backup: cannot start the archive: {}", archive_error_string(a.get()));
  add_entry(a.get(), kManifest, manifest.dump(1));  // first: a reader checks against it
  for (const auto& [path, data] : files) add_entry(a.get(), path, data);
  DDPX_CHECK(archive_write_close(a.get()) == ARCHIVE_OK, ErrorKind::kIo,
             "backup: cannot finish the archive: {}", archive_error_string(a.get()));
  return out;
}

Backup read_backup(const std::string& bytes, const std::string& name, const std::string& dir) {
  namespace fs = std::filesystem;
  constexpr ErrorKind bad = ErrorKind::kUsage;
  ArchivePtr a(archive_read_new(), archive_read_free);
  archive_read_support_filter_gzip(a.get());
  archive_read_support_format_tar(a.get());
  DDPX_CHECK(archive_read_open_memory(a.get(), bytes.data(), bytes.size()) == ARCHIVE_OK, bad,
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
    // tar writes its folders too: the two a backup has carry nothing.
    if (archive_entry_filetype(entry) == AE_IFDIR &&
        (path == "checkpoints/" || path == "logs/" || path == "checkpoints" || path == "logs"))
      continue;
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
    std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> sha(EVP_MD_CTX_new(), EVP_MD_CTX_free);
    EVP_DigestInit_ex(sha.get(), EVP_sha256(), nullptr);
    char buffer[1 << 16];
    uint64_t got = 0;
    for (la_ssize_t n; (n = archive_read_data(a.get(), buffer, sizeof(buffer))) != 0;) {
      DDPX_CHECK(n > 0, bad, "{}: damaged data in {}: {}", name, path,
                 archive_error_string(a.get()));
      out.write(buffer, n);
      EVP_DigestUpdate(sha.get(), buffer, static_cast<size_t>(n));
      got += static_cast<uint64_t>(n);
    }
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    EVP_DigestFinal_ex(sha.get(), digest, &length);
    std::string hex;
    for (unsigned int i = 0; i < length; ++i) hex += fmt::format("{:02x}", digest[i]);
    DDPX_CHECK(got == size && hex == it->second["sha256"].get<std::string>(), bad,
               "{}: {} does not match its SHA-256 in the manifest (damaged in transit?)", name,
               path);
    out.close();
    DDPX_CHECK(out, ErrorKind::kIo, "cannot write {}", target.string());
    if (path.rfind("checkpoints/", 0) == 0) backup.checkpoints.push_back(target.string());
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
  backup.extra_ports = job["ports"];
  return backup;
}

}  // namespace ddpx::serve
