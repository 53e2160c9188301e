#include "data/download.h"

#include <curl/curl.h>
#include <openssl/evp.h>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "core/env.h"
#include "core/error.h"
#include "core/log.h"
#include "io/archive.h"

namespace ddpx::data {
namespace {

namespace fs = std::filesystem;

constexpr const char* kMnistBase = "https://ossci-datasets.s3.amazonaws.com/mnist/";
constexpr const char* kFashionBase = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/";
constexpr const char* kCifarBase = "https://www.cs.toronto.edu/~kriz/";
// tiktoken's r50k_base (tiktoken_ext/openai_public.py), which is GPT-2's vocabulary as a rank
// file; the SHA-256 is tiktoken's expected_hash for it.
constexpr const char* kTiktokenBase = "https://openaipublic.blob.core.windows.net/encodings/";
// char-rnn's tinyshakespeare, the text of nanoGPT's shakespeare_char and llm.c's tinyshakespeare
// (1,115,394 bytes).
constexpr const char* kShakespeareBase =
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/";

std::vector<RemoteFile> idx_files(const char* base, const char* const md5s[4]) {
  const char* names[4] = {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
                          "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"};
  std::vector<RemoteFile> files;
  for (int i = 0; i < 4; ++i) files.push_back({base, names[i], md5s[i], false, ""});
  return files;
}

size_t write_to_file(char* data, size_t size, size_t count, void* user) {
  return std::fwrite(data, size, count, static_cast<std::FILE*>(user)) * size;
}

void global_curl_init() {
  static const bool done = [] { return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK; }();
  DDPX_CHECK(done, ErrorKind::kIo, "libcurl failed to initialise");
}

// url -> path, throwing on any transfer error; the caller owns cleanup of `path`.
void curl_to_file(const std::string& url, const std::string& path, const DownloadOptions& options) {
  global_curl_init();
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> out(std::fopen(path.c_str(), "wb"), std::fclose);
  DDPX_CHECK(out != nullptr, ErrorKind::kIo, "cannot write {}; check the data_dir permissions",
             path);
  std::unique_ptr<CURL, void (*)(CURL*)> curl(curl_easy_init(), curl_easy_cleanup);
  DDPX_CHECK(curl != nullptr, ErrorKind::kIo, "libcurl failed to initialise");
  char error[CURL_ERROR_SIZE] = {0};
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
  curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, options.connect_timeout_s);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, options.stall_timeout_s);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, write_to_file);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, out.get());
  curl_easy_setopt(c, CURLOPT_USERAGENT, "ddpx/0.1");
  CURLcode rc = curl_easy_perform(c);
  bool flushed = std::fflush(out.get()) == 0;
  if (rc != CURLE_OK) {
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    std::string detail = error[0] ? error : curl_easy_strerror(rc);
    fail(rc == CURLE_OPERATION_TIMEDOUT ? ErrorKind::kTimeout : ErrorKind::kIo,
         "downloading {} failed: {}{}; check the network or pass --mirror URL", url, detail,
         status >= 400 ? fmt::format(" (HTTP {})", status) : std::string());
  }
  DDPX_CHECK(flushed, ErrorKind::kIo, "writing {} failed (disk full?)", path);
}

}  // namespace

std::vector<RemoteFile> remote_files(const std::string& name) {
  if (name == "mnist") {
    static const char* const md5s[4] = {
        "f68b3c2dcbeaaa9fbdd348bbdeb94873", "d53e105ee54ea40749a09fcbcd1e9432",
        "9fb629c4189551a2d022fa330f9573f3", "ec29112dd5afa0611ce80d1b7f02629c"};
    return idx_files(kMnistBase, md5s);
  }
  if (name == "fashion-mnist") {
    static const char* const md5s[4] = {
        "8d4fb7e6c68d591d4c3dfef9ec88bf0d", "25c81989df183df01b3e8a0aad5dffbe",
        "bef4ecab320f06d8554ea6380940ec79", "bb300cfdad3c16e7a12a480ee83cd310"};
    return idx_files(kFashionBase, md5s);
  }
  if (name == "cifar10")
    return {{kCifarBase, "cifar-10-python.tar.gz", "c58f30108f718f92721af3b95e74349a", true, ""}};
  if (name == "cifar100")
    return {{kCifarBase, "cifar-100-python.tar.gz", "eb9058c3a382ffc7106e4002c42a8d85", true, ""}};
  if (name == "gpt2-vocab")
    return {{kTiktokenBase, "r50k_base.tiktoken", "8b1899fed9fa1619c609fa4ab4c10114", false,
             "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"}};
  if (name == "tinyshakespeare")
    return {{kShakespeareBase, "input.txt", "6fb458f1232090904fb40fe944165e91", false,
             "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"}};
  fail(ErrorKind::kUsage,
       "cannot download '{}'; expected mnist, fashion-mnist, cifar10, cifar100, tinyshakespeare "
       "or gpt2-vocab (synthetic needs no files)",
       name);
}

namespace {

std::string digest_file(const std::string& path, const EVP_MD* md) {
  std::ifstream in(path, std::ios::binary);
  DDPX_CHECK(in.good(), ErrorKind::kIo, "cannot open {}", path);
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  DDPX_CHECK(ctx && EVP_DigestInit_ex(ctx.get(), md, nullptr) == 1, ErrorKind::kInternal,
             "OpenSSL's {} is unavailable", EVP_MD_get0_name(md));
  char buffer[1 << 16];
  while (in) {
    in.read(buffer, sizeof(buffer));
    if (in.gcount() > 0) EVP_DigestUpdate(ctx.get(), buffer, static_cast<size_t>(in.gcount()));
  }
  DDPX_CHECK(!in.bad(), ErrorKind::kIo, "reading {} failed", path);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(ctx.get(), digest, &length);
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

// The file's SHA-256 matches `file.sha256`, or there is none to check.
bool sha256_matches(const RemoteFile& file, const std::string& path) {
  return file.sha256.empty() || digest_file(path, EVP_sha256()) == file.sha256;
}

}  // namespace

std::string md5_file(const std::string& path) { return digest_file(path, EVP_md5()); }

void fetch_file(const RemoteFile& file, const std::string& data_dir,
                const DownloadOptions& options) {
  fs::create_directories(data_dir);
  const std::string target = (fs::path(data_dir) / file.file).string();
  const std::string part = target + ".part";
  std::string base =
      options.mirror.empty() ? env::get_or("DDPX_DATA_MIRROR", file.base_url) : options.mirror;
  if (!base.empty() && base.back() != '/') base += '/';
  const std::string url = base + file.file;
  bool present =
      fs::is_regular_file(target) && md5_file(target) == file.md5 && sha256_matches(file, target);
  if (!present) {
    if (options.progress) log::info("downloading {} -> {}", url, target);
    try {
      curl_to_file(url, part, options);
      std::string got = md5_file(part);
      DDPX_CHECK(got == file.md5, ErrorKind::kData,
                 "{}: MD5 is {}, expected {}; the download is corrupt or the mirror serves "
                 "another file, run the command again or use another --mirror",
                 url, got, file.md5);
      DDPX_CHECK(sha256_matches(file, part), ErrorKind::kData,
                 "{}: SHA-256 is not {}; the download is corrupt or the mirror serves another "
                 "file, run the command again or use another --mirror",
                 url, file.sha256);
      fs::rename(part, target);
    } catch (...) {
      std::error_code ignored;
      fs::remove(part, ignored);
      throw;
    }
  } else if (options.progress) {
    log::info("{} is already present and verified", target);
  }
  if (file.unpack) {
    if (options.progress) log::info("unpacking {}", target);
    io::extract_archive(target, data_dir);
  }
}

std::map<std::string, std::string> read_checksums(const std::string& path) {
  std::ifstream in(path);
  DDPX_CHECK(in.good(), ErrorKind::kUsage, "--checksums {}: cannot open the file", path);
  std::map<std::string, std::string> sums;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    // md5sum's format: 32 hex digits, a space, a space or '*' (binary mode), the file name.
    bool ok = line.size() > 34 && (line[32] == ' ') && (line[33] == ' ' || line[33] == '*');
    for (size_t i = 0; ok && i < 32; ++i) ok = std::isxdigit(static_cast<unsigned char>(line[i]));
    DDPX_CHECK(ok, ErrorKind::kUsage,
               "--checksums {} line {}: expected 'MD5  FILE' as md5sum writes it, got '{}'", path,
               number, line);
    std::string md5 = line.substr(0, 32);
    for (char& c : md5) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string file = line.substr(34);
    while (!file.empty() && (file.back() == '\r' || file.back() == ' ')) file.pop_back();
    sums[fs::path(file).filename().string()] = md5;
  }
  return sums;
}

std::string download_dataset(const std::string& name, const DownloadOptions& options) {
  auto files = remote_files(name);
  if (!options.checksums.empty()) {
    const auto sums = read_checksums(options.checksums);
    for (auto& file : files) {
      auto it = sums.find(file.file);
      DDPX_CHECK(it != sums.end(), ErrorKind::kUsage,
                 "--checksums {} lists no MD5 for {}; {} needs a line 'MD5  FILE' for each of its "
                 "files",
                 options.checksums, file.file, name);
      file.md5 = it->second;
      file.sha256.clear();  // the list stands for the mirror's copies
    }
  }
  // Not default_data_dir: Debian's read-only Fashion-MNIST folder holds recompressed files
  // (other MD5s) that the reader accepts but a download cannot replace.
  std::string dir = options.data_dir.empty() ? "./data/" + name : options.data_dir;
  for (const auto& file : files) fetch_file(file, dir, options);
  return dir;
}

}  // namespace ddpx::data
