// libFuzzer target: the safetensors reader (io/safetensors.h) on arbitrary bytes. Any
// ddpx::Error is a correct rejection; a crash, leak, sanitizer report or an allocation beyond
// the input's size is a bug. What it accepts must survive the writer and read back the same.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  ddpx::io::Safetensors file;
  try {
    file = ddpx::io::parse_safetensors(bytes, "fuzz");
  } catch (const ddpx::Error&) {
    return 0;
  }
  // Accepted: writing it again and reading that back gives the same tensors.
  auto again = ddpx::io::parse_safetensors(ddpx::io::safetensors_bytes(file.tensors, file.metadata),
                                           "fuzz (written again)");
  if (again.tensors.size() != file.tensors.size() || again.metadata != file.metadata) std::abort();
  for (const auto& [name, tensor] : file.tensors) {
    const auto& other = again.tensors.at(name);
    if (other.sizes() != tensor.sizes() || other.scalar_type() != tensor.scalar_type())
      std::abort();
    if (tensor.numel() == 0) continue;
    // Bytes, not values: NaNs are not equal to themselves. Flattened first: a scalar (0-d)
    // tensor cannot be viewed as another element size.
    auto a = tensor.contiguous().reshape({-1}).view(torch::kUInt8);
    auto b = other.contiguous().reshape({-1}).view(torch::kUInt8);
    if (!a.equal(b)) std::abort();
  }
  return 0;
}
