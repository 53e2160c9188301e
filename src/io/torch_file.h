// The byte-level reader of files written by Python's torch.save: the zip archive and, for
// state_dicts, the pickle in it. Fuzzing libtorch 1.13 found its zip reader leaking when it
// rejected a file and its unpickler trusting lengths, stack depths and tensor extents from the
// file (a fuzzed pickle made it allocate gigabytes or read past a storage; docs/reliability.md).
// So ddpx reads the zip itself and a state_dict's pickle with its own pickle machine
// (io/pickle.h): only what a well-formed state_dict holds gets through, as plain descriptions of
// its tensors, and libtorch's unpickler never sees the bytes.
//
// Everything here throws ddpx::Error(kData) naming `path` on malformed input.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

// One tensor of a state_dict as torch.save pickles it, torch._utils._rebuild_tensor_v2(storage,
// offset, sizes, strides, requires_grad, hooks) (in _rebuild_parameter for a Parameter), over the
// storage its persistent id names: ('storage', torch.FloatStorage, key, location, numel).
// Nothing here is checked against the storage's bytes: the caller does, when it has them.
struct PickledTensor {
  std::string storage_key;    // its bytes are the archive's record data/<storage_key>
  std::string storage_type;   // "FloatStorage", "LongStorage", ...: plain storages only
  int64_t storage_numel = 0;  // the elements the storage claims
  int64_t offset = 0;         // in elements
  std::vector<int64_t> sizes, strides;
};

// The name -> tensor entries of a state_dict's data.pkl (a dict or an OrderedDict; the module
// versions torch.nn.Module.state_dict() attaches as `_metadata` are left out), in file order. The
// pickle goes through io/pickle with what a state_dict needs and no more: only the opcodes
// torch.save's protocol 2 writes, every length within the data, no stack or mark underflow, memo
// slots written in order and read only once written, and only the globals of tensors, plain (not
// quantized) storages and OrderedDict; then every entry must be a str key and a tensor.
std::vector<std::pair<std::string, PickledTensor>> read_state_dict_pickle(std::string_view pickle,
                                                                          const std::string& path);

}  // namespace ddpx::io
