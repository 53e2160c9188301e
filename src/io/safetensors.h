// The safetensors format of Hugging Face (model.safetensors): an 8-byte little-endian header
// length N, N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, optional
// "__metadata__": {string: string}}, then the data buffer the offsets point into.
//
// The reader trusts nothing in the header: it is capped at 100 MB (as the safetensors library
// caps it), every tensor's byte count must equal its dtype times its shape, and the tensors must
// tile the buffer exactly (sorted by offset, each beginning where the previous ended, the last
// ending at the end of the file): an offset past the end, an overlap, a gap or trailing bytes
// are all refused. Each refusal is one ddpx::Error(kData) line naming the file and what is wrong.
// Tensors come back as CPU torch tensors of the file's dtype (F32, F16, BF16, F64, I64, I32, I16,
// I8, U8, BOOL); others (F8_*, U16..U64, complex) are refused by name.
//
// The writer lays files out as the safetensors library does (tensors by alignment, then name;
// the header padded with spaces to a multiple of 8), so a file written here is byte for byte the
// one safetensors.torch.save_file writes for the same tensors and metadata.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace ddpx::io {

constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;  // the safetensors library's cap

struct Safetensors {
  std::map<std::string, torch::Tensor> tensors;
  std::map<std::string, std::string> metadata;  // "__metadata__", e.g. {"format": "pt"}
};

// Reads `path` through a read-only memory map: tensors whose offset suits their alignment view
// the mapping (which lives as long as any of them does), the rest are copied. Throws kIo when
// the file cannot be opened, kData when it is not a valid safetensors file.
Safetensors read_safetensors(const std::string& path);

// The same on bytes in memory (copied into the tensors); `source` names them in errors. The
// fuzz target's entry point: any input gives tensors or a ddpx::Error(kData).
Safetensors parse_safetensors(std::string_view bytes, const std::string& source);

// The file's bytes for `tensors` (any device, dtype one of the ten above, made contiguous).
std::string safetensors_bytes(const std::map<std::string, torch::Tensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// Writes safetensors_bytes(...) to `path` atomically (core/atomic_file.h).
void write_safetensors(const std::string& path, const std::map<std::string, torch::Tensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace ddpx::io
