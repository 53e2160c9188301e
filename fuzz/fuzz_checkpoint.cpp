// libFuzzer target: ddpx checkpoints, whole files (header, CRC-32, payload) through the real
// readers (read_checkpoint_meta_bytes, and load_checkpoint_bytes into a small model and
// optimizer), and the same bytes as a payload through ddpx's zip check (io/torch_file.h),
// the guard in front of libtorch's archive reader. A ddpx::Error is a correct rejection;
// anything else is a bug.
//
// The CRC-32 is what keeps damaged bytes away from libtorch's TorchScript importer, which
// crashes on forged payloads (docs/reliability.md). DDPX_FUZZ_FRAME=1 frames every input that
// lacks the magic with a correct header and CRC, to fuzz that importer behind the checksum.
// DDPX_FUZZ_VERBOSE=1 prints what each input gave (for triage: `fuzz_checkpoint FILE...`).
// DDPX_FUZZ_WRITE_SEEDS=DIR writes seed inputs with the real writer (save_checkpoint) and exits.
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>
#include <torch/version.h>
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "core/atomic_file.h"
#include "core/error.h"
#include "io/torch_file.h"
#include "train/checkpoint.h"

namespace {

constexpr char kMagic[] = "DDPXCKPT";
constexpr size_t kMagicBytes = 8;
constexpr size_t kHeaderBytes = 8 + 4 + 8 + 4;

struct Fixture {
  torch::nn::Linear model{torch::nn::LinearOptions(4, 3)};
  torch::optim::SGD optimizer{model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)};
  ddpx::train::CheckpointMeta meta{"linear", 3};
};

std::string framed(const uint8_t* payload, size_t size) {
  std::string file(kMagic, kMagicBytes);
  uint32_t version = 1;
  uint64_t bytes = size;
  uint32_t crc = static_cast<uint32_t>(::crc32(::crc32(0L, Z_NULL, 0), payload, size));
  file.append(reinterpret_cast<const char*>(&version), 4);
  file.append(reinterpret_cast<const char*>(&bytes), 8);
  file.append(reinterpret_cast<const char*>(&crc), 4);
  file.append(reinterpret_cast<const char*>(payload), size);
  return file;
}

void write_seeds(const std::string& dir) {
  std::filesystem::create_directories(dir);
  for (int steps = 0; steps < 2; ++steps) {
    Fixture f;
    for (int i = 0; i < steps; ++i) {  // momentum buffers exist only after a step
      auto loss = f.model(torch::randn({8, 4})).pow(2).sum();
      f.optimizer.zero_grad();
      loss.backward();
      f.optimizer.step();
    }
    // Named after the libtorch that wrote them: checkpoints of older builds stay seeds too.
    std::string path = dir + "/linear_torch" + std::to_string(TORCH_VERSION_MAJOR) + "." +
                       std::to_string(TORCH_VERSION_MINOR) + "_step" + std::to_string(steps) +
                       ".ddpx";
    ddpx::train::save_checkpoint(path, *f.model, f.optimizer, {steps, 10 * steps}, f.meta);
    // The same checkpoint as a bare payload, for the framed path.
    ddpx::write_file_atomic(path + ".payload", ddpx::read_file(path).substr(kHeaderBytes));
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  torch::set_num_threads(1);
  if (const char* dir = std::getenv("DDPX_FUZZ_WRITE_SEEDS")) {
    write_seeds(dir);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool verbose = std::getenv("DDPX_FUZZ_VERBOSE") != nullptr;
  static const bool frame = std::getenv("DDPX_FUZZ_FRAME") != nullptr;
  const bool whole = size >= kMagicBytes && std::memcmp(data, kMagic, kMagicBytes) == 0;
  std::string bytes =
      whole || !frame ? std::string(reinterpret_cast<const char*>(data), size) : framed(data, size);
  try {
    // The payload alone: a framed input's header is not part of the archive.
    ddpx::io::read_torch_zip(whole ? bytes.substr(kHeaderBytes < size ? kHeaderBytes : size)
                                   : std::string(reinterpret_cast<const char*>(data), size),
                             "fuzz", "");
  } catch (const ddpx::Error& e) {
    if (verbose) std::printf("zip rejected: %s\n", e.what());
  }
  try {
    auto meta = ddpx::train::read_checkpoint_meta_bytes(bytes, "fuzz");
    if (verbose) std::printf("meta: model %s, %ld classes\n", meta.model.c_str(), meta.num_classes);
  } catch (const ddpx::Error& e) {
    if (verbose) std::printf("meta rejected: %s\n", e.what());
  }
  try {
    Fixture f;
    auto position =
        ddpx::train::load_checkpoint_bytes(bytes, "fuzz", *f.model, f.optimizer, f.meta);
    if (verbose)
      std::printf("loaded: %ld epochs, %ld steps\n", position.epochs_done, position.global_step);
  } catch (const ddpx::Error& e) {
    if (verbose) std::printf("load rejected: %s\n", e.what());
  }
  return 0;
}
