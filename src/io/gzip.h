// Reading files that may be gzip-compressed (MNIST's .gz files are read as they are
// downloaded). Decompression has an output cap so a hostile file cannot exhaust memory.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace ddpx::io {

constexpr int64_t kMaxInflatedBytes = int64_t{2} << 30;  // 2 GiB: far above any dataset file

bool is_gzip(std::string_view bytes);
// Inflates a gzip stream (concatenated members included); `source` names it in errors.
std::string gunzip(std::string_view bytes, const std::string& source,
                   int64_t max_bytes = kMaxInflatedBytes);
// The file's bytes, inflated when they start with the gzip magic.
std::string read_maybe_gzip(const std::string& path);

}  // namespace ddpx::io
