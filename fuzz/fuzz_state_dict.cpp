// libFuzzer target: state_dicts written by Python's torch.save (a zip holding data.pkl and the
// tensor records), read by read_state_dict_bytes. Every tensor read is summed, as loading it
// into a model would read all of its elements. A ddpx::Error is a correct rejection; anything
// else (crash, sanitizer report, leak, timeout, out-of-memory) is a bug.
// DDPX_FUZZ_VERBOSE=1 prints what each input gave (for triage: `fuzz_state_dict FILE...`).
#include <torch/torch.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "models/weights.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  torch::set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool verbose = std::getenv("DDPX_FUZZ_VERBOSE") != nullptr;
  std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    for (const auto& [name, tensor] : ddpx::models::read_state_dict_bytes(bytes, "fuzz")) {
      double sum = tensor.to(torch::kDouble).sum().item<double>();
      if (verbose) std::printf("%s %s sum %g\n", name.c_str(), tensor.toString().c_str(), sum);
    }
  } catch (const ddpx::Error& e) {
    if (verbose) std::printf("rejected: %s\n", e.what());
  }
  return 0;
}
