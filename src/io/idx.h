// The IDX format of MNIST and Fashion-MNIST: a big-endian header (magic 0x0000080D where D is
// the number of dimensions, then D uint32 sizes) followed by uint8 data. The magic and the
// exact length are checked; gzip is io/gzip.h's business.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace ddpx::io {

// In-memory parsers (also the fuzz entry points). `source` names the bytes in errors.
torch::Tensor parse_idx_images(std::string_view bytes, const std::string& source);  // (N,H,W,1)
torch::Tensor parse_idx_labels(std::string_view bytes, const std::string& source,
                               int64_t num_classes);  // (N) int64

}  // namespace ddpx::io
