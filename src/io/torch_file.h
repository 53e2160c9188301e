// The byte-level guard in front of libtorch's unpickler for files written by Python's
// torch.save. Fuzzing libtorch 1.13 found its zip reader leaking when it rejected a file and its
// unpickler trusting lengths, stack depths and tensor extents from the file (a fuzzed pickle made
// it allocate gigabytes or read past a storage; docs/reliability.md); the guard stays on 2.11. So
// ddpx reads the zip itself and parses the pickle with its own pickle machine (io/pickle.h) before
// libtorch sees it; only what a well-formed state_dict can hold gets through.
//
// Everything here throws ddpx::Error(kData) naming `path` on malformed input.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>

namespace ddpx::io {

// The records of a torch zip archive (torch.save and torch::jit::save write one), keyed by their
// name inside the archive folder ("data.pkl", "version", "data/0"): views into `bytes` of the
// stored (uncompressed) records; deflated ones (TorchScript code) are only named. Errors read
// "'PATH' is not a torch zip archive (WHY); HINT".
struct TorchZip {
  std::map<std::string, std::string_view> records;
  std::set<std::string> compressed;
  uint64_t version = 0;  // the "version" record, within what this libtorch reads
};
TorchZip read_torch_zip(std::string_view bytes, const std::string& path, const std::string& hint);

// Runs the pickle through io/pickle with what a state_dict needs and no more: only the opcodes
// torch.save writes, every length within the data, no stack or mark underflow, memo slots
// written in order and read only once written, and only the globals of tensors, plain (not
// quantized) storages and OrderedDict.
void check_state_dict_pickle(std::string_view pickle, const std::string& path);

}  // namespace ddpx::io
