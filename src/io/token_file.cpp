#include "io/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "core/atomic_file.h"
#include "core/error.h"

// The format is little-endian (numpy's tobytes() on the machines llm.c runs on); tokens are
// copied with memcpy, which is only right on a little-endian host.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token files assume a little-endian host");

namespace ddpx::io {
namespace {

constexpr int kVersionUint16 = 1;
constexpr int kVersionUint32 = 7;

int32_t le32(std::string_view bytes, size_t at) {
  int32_t v;
  std::memcpy(&v, bytes.data() + at, 4);
  return v;
}

template <typename T>
torch::Tensor widen(const char* data, int64_t count, const std::string& source) {
  auto out = torch::empty({count}, torch::kInt32);
  int32_t* dst = out.data_ptr<int32_t>();
  for (int64_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, data + i * sizeof(T), sizeof(T));
    if constexpr (sizeof(T) == 4) {
      DDPX_CHECK(v <= static_cast<T>(std::numeric_limits<int32_t>::max()), ErrorKind::kData,
                 "{}: token {} at position {} is past any vocabulary (at most 2^31-1); is this a "
                 "token file?",
                 source, v, i);
    }
    dst[i] = static_cast<int32_t>(v);
  }
  return out;
}

// A read-only mapping of a whole file, unmapped on scope exit.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      DDPX_CHECK(err != ENOENT, ErrorKind::kData,
                 "{}: no such token file; write one with `ddpx data tokenize`", path);
      fail(ErrorKind::kIo, "cannot open {}: {}", path, std::strerror(err));
    }
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      fail(ErrorKind::kData, "{}: not a regular file, expected a token file", path);
    }
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      int err = errno;
      ::close(fd);
      DDPX_CHECK(p != MAP_FAILED, ErrorKind::kIo, "cannot map {}: {}", path, std::strerror(err));
      data_ = static_cast<const char*>(p);
      ::madvise(p, size_, MADV_SEQUENTIAL);
    } else {
      ::close(fd);
    }
  }
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<char*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  std::string_view bytes() const { return {data_ == nullptr ? "" : data_, size_}; }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace

torch::Tensor parse_token_file(std::string_view bytes, const std::string& source, bool headerless,
                               TokenFileInfo* info) {
  TokenFileInfo found;
  torch::Tensor tokens;
  if (headerless) {
    DDPX_CHECK(bytes.size() % 2 == 0, ErrorKind::kData,
               "{}: {} bytes is an odd length for a headerless file of uint16 tokens; is it "
               "truncated, or an llm.c token file (then read it without headerless)?",
               source, bytes.size());
    found.num_tokens = static_cast<int64_t>(bytes.size() / 2);
    tokens = widen<uint16_t>(bytes.data(), found.num_tokens, source);
  } else {
    DDPX_CHECK(bytes.size() >= static_cast<size_t>(kTokenFileHeaderBytes), ErrorKind::kData,
               "{}: {} bytes is shorter than the 1024-byte header of an llm.c token file; is it "
               "truncated, or a headerless uint16 file (nanoGPT's prepare.py; read it as "
               "headerless)?",
               source, bytes.size());
    int32_t magic = le32(bytes, 0);
    DDPX_CHECK(magic == kTokenFileMagic || magic == kTokenFileMagicUint32, ErrorKind::kData,
               "{}: magic number is {}, expected {} or {} (llm.c's token files); if it is a "
               "headerless uint16 file (nanoGPT's prepare.py), read it as headerless, else write "
               "it again with `ddpx data tokenize`",
               source, magic, kTokenFileMagic, kTokenFileMagicUint32);
    found.version = le32(bytes, 4);
    DDPX_CHECK(found.version == kVersionUint16 || found.version == kVersionUint32, ErrorKind::kData,
               "{}: token file version {}, expected 1 (uint16 tokens) or 7 (uint32 tokens)", source,
               found.version);
    int32_t count = le32(bytes, 8);
    size_t width = found.version == kVersionUint16 ? 2 : 4;
    size_t payload = bytes.size() - kTokenFileHeaderBytes;
    DDPX_CHECK(payload % width == 0, ErrorKind::kData,
               "{}: {} bytes of tokens is not a whole number of {}-byte tokens; the file is "
               "truncated or damaged: write it again",
               source, payload, width);
    DDPX_CHECK(count >= 0 && static_cast<size_t>(count) == payload / width, ErrorKind::kData,
               "{}: the header promises {} tokens, the file holds {} ({}); write it again", source,
               count, payload / width,
               count >= 0 && static_cast<size_t>(count) > payload / width ? "truncated"
                                                                          : "trailing bytes");
    found.num_tokens = count;
    const char* data = bytes.data() + kTokenFileHeaderBytes;
    tokens =
        width == 2 ? widen<uint16_t>(data, count, source) : widen<uint32_t>(data, count, source);
  }
  if (info != nullptr) *info = found;
  return tokens;
}

torch::Tensor read_token_file(const std::string& path, bool headerless, TokenFileInfo* info) {
  MappedFile file(path);
  return parse_token_file(file.bytes(), path, headerless, info);
}

void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens) {
  DDPX_CHECK(tokens.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()),
             ErrorKind::kData,
             "{}: {} tokens do not fit one llm.c token file (its count is an int32); split the "
             "input into several files",
             path, tokens.size());
  bool narrow = true;
  for (uint32_t t : tokens) narrow = narrow && t < (1u << 16);
  size_t width = narrow ? 2 : 4;
  std::string bytes(kTokenFileHeaderBytes + tokens.size() * width, '\0');
  int32_t header[3] = {narrow ? kTokenFileMagic : kTokenFileMagicUint32,
                       narrow ? kVersionUint16 : kVersionUint32,
                       static_cast<int32_t>(tokens.size())};
  std::memcpy(bytes.data(), header, sizeof(header));
  char* out = bytes.data() + kTokenFileHeaderBytes;
  if (narrow) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      auto v = static_cast<uint16_t>(tokens[i]);
      std::memcpy(out + 2 * i, &v, 2);
    }
  } else if (!tokens.empty()) {
    std::memcpy(out, tokens.data(), tokens.size() * 4);
  }
  write_file_atomic(path, bytes);
}

}  // namespace ddpx::io
