#include "io/tar_index.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <sstream>

#include "core/atomic_file.h"

namespace ddpx::io {

namespace {

constexpr const char* kMagic = "ddpx-tar-index";
constexpr int kVersion = 1;

std::string to_hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

std::optional<std::string> from_hex(const std::string& hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < hex.size(); i += 2) {
    int value = 0;
    for (size_t k = i; k < i + 2; ++k) {
      const char c = hex[k];
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) return std::nullopt;
      value = value * 16 + d;
    }
    out += static_cast<char>(value);
  }
  return out;
}

int64_t nanoseconds(const struct timespec& t) {
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

}  // namespace

std::string tar_index_path(const std::string& tar) { return tar + ".idx"; }

void write_tar_index(const std::string& tar, const std::vector<TarMember>& members) {
  struct stat st;
  const int64_t bytes = stat(tar.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
  std::string text = fmt::format("{} {} {} {}\n", kMagic, kVersion, bytes, members.size());
  for (const TarMember& m : members)
    text += fmt::format("{} {} {} {}\n", m.offset, m.size, m.data.empty() ? "-" : to_hex(m.data),
                        m.name);
  write_file_atomic(tar_index_path(tar), text);
}

std::optional<std::vector<TarMember>> read_tar_index(const std::string& tar) {
  const std::string path = tar_index_path(tar);
  struct stat tar_st, index_st;
  if (stat(tar.c_str(), &tar_st) != 0 || stat(path.c_str(), &index_st) != 0) return std::nullopt;
  if (nanoseconds(index_st.st_mtim) < nanoseconds(tar_st.st_mtim)) return std::nullopt;
  std::string text;
  try {
    text = read_file(path);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return parse_tar_index(text, static_cast<int64_t>(tar_st.st_size));
}

std::optional<std::vector<TarMember>> parse_tar_index(std::string_view view, int64_t tar_bytes) {
  std::istringstream in{std::string(view)};
  std::string magic, line;
  int version = 0;
  int64_t bytes = -1, count = -1;
  if (!(in >> magic >> version >> bytes >> count) || magic != kMagic || version != kVersion ||
      bytes < 0 || (tar_bytes >= 0 && bytes != tar_bytes) || count < 0)
    return std::nullopt;
  std::getline(in, line);  // the header's end
  std::vector<TarMember> members;
  members.reserve(static_cast<size_t>(std::min<int64_t>(count, 1 << 16)));
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    TarMember m;
    std::string data;
    if (!(fields >> m.offset >> m.size >> data) || fields.get() != ' ') return std::nullopt;
    std::getline(fields, m.name);
    if (m.name.empty() || m.offset < 0 || m.size < 0 || m.offset > bytes ||
        m.size > bytes - m.offset)
      return std::nullopt;
    // As list_tar gives them: a small member's bytes inline, a larger one's not.
    if (m.size <= kTarInlineBytes && m.size > 0) {
      auto decoded = from_hex(data);
      if (!decoded || static_cast<int64_t>(decoded->size()) != m.size) return std::nullopt;
      m.data = std::move(*decoded);
    } else if (data != "-") {
      return std::nullopt;
    }
    members.push_back(std::move(m));
  }
  if (static_cast<int64_t>(members.size()) != count) return std::nullopt;
  return members;
}

}  // namespace ddpx::io
