// libFuzzer target: CIFAR-10 and CIFAR-100 binary batches on arbitrary bytes.
// Any ddpx::Error is a correct rejection; a crash, leak or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "io/cifar.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  for (bool cifar100 : {false, true}) {
    try {
      ddpx::io::parse_cifar_binary(bytes, "fuzz", cifar100);
    } catch (const ddpx::Error&) {
    }
  }
  return 0;
}
