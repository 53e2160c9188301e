// libFuzzer target: the pickle reader, then the CIFAR batch interpretation of what it read.
// Any ddpx::Error is a correct rejection; a crash, leak or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "io/cifar.h"
#include "io/pickle.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  ddpx::io::pickle::Limits limits;
  limits.max_values = 1 << 16;  // keeps each run fast; the logic is the same as the default
  try {
    ddpx::io::pickle::parse(bytes, "fuzz", limits);
  } catch (const ddpx::Error&) {
  }
  try {
    ddpx::io::parse_cifar_python(bytes, "fuzz", size % 2 == 0);
  } catch (const ddpx::Error&) {
  }
  return 0;
}
