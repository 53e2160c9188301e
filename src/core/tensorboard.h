// A TensorBoard event-file writer without TensorFlow, protobuf or torch: scalars go to one
// `events.out.tfevents.<unix seconds>.<hostname>.<pid>.<n>` file in the log directory, the name
// TensorFlow and PyTorch's SummaryWriter use, so `tensorboard --logdir DIR` finds it.
//
// Contract: one writer owns its file; it is not thread-safe (call it from one thread, on rank 0
// unless every rank is meant to log into its own directory). Every add_* call writes one Event
// record and flushes it to the kernel, so TensorBoard shows the data while training runs; the
// destructor flushes and closes (and swallows errors: use flush() to see them). A directory that
// cannot be created or written throws kUsage; a failed write (disk full) throws kIo naming the
// file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace ddpx {

class TensorBoardWriter {
 public:
  explicit TensorBoardWriter(const std::string& log_dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void add_scalar(const std::string& tag, double value, int64_t step);
  // Several scalars of one step (e.g. train and test loss) in a single Event.
  void add_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  void flush();

  const std::string& path() const { return path_; }

 private:
  void write_event(const std::string& event);

  std::string path_;
  std::FILE* file_ = nullptr;
};

namespace detail {

// CRC-32C (Castagnoli), the checksum of TFRecord framing; crc32c("123456789", 9) == 0xE3069283.
uint32_t crc32c(const void* data, size_t size);

}  // namespace detail

}  // namespace ddpx
