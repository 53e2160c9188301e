// The frame of every checkpoint file, a whole checkpoint or a sharded one's index and parts:
//   "DDPXCKPT" | u32 format version | u64 payload bytes | u32 CRC-32 of payload | payload
// where the payload is a torch::serialize archive. Written atomically (core/atomic_file.h); on
// read, a wrong magic, a short file or a CRC mismatch is a kData error naming the file, before
// libtorch's archive reader sees a byte.
#pragma once

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <exception>
#include <string>

namespace ddpx::train {

// Frames `archive` and writes it to `path` atomically, creating its folder.
void write_framed_archive(const std::string& path, torch::serialize::OutputArchive& archive);

// The archive in checkpoint bytes, verified; `name` (the file) labels errors. `device`: where the
// tensors land, as torch.load's map_location (never the device each was saved from).
torch::serialize::InputArchive open_framed_archive(const std::string& bytes,
                                                   const std::string& name,
                                                   torch::Device device = torch::kCPU);
torch::serialize::InputArchive open_framed_file(const std::string& path,
                                                torch::Device device = torch::kCPU);

// libtorch's message without its C++ backtrace.
std::string message_of(const std::exception& e);

// Rethrows a ddpx::Error; anything else becomes kData: "NAME passed its checksum but is not a
// ddpx checkpoint: ...".
[[noreturn]] void fail_undecodable(const std::string& name, const std::exception& e);

// A checkpoint written sharded is a folder (sharded_checkpoint.h): its files.
bool is_sharded_checkpoint(const std::string& path);  // a folder
std::string partial_folder(const std::string& path);  // where the parts are written first
std::string index_file(const std::string& folder);
std::string part_file(const std::string& folder, int rank, int world_size);
// The index's top archive, verified, on `device` (kData when the folder has none: unfinished).
torch::serialize::InputArchive open_index(const std::string& folder,
                                          torch::Device device = torch::kCPU);
// The world size the index's layout gives; `layout` is its "sharded" archive.
int layout_world_size(torch::serialize::InputArchive& layout, const std::string& name);
// Every file of the folder verified (frames and checksums), kData naming the first bad one.
void verify_parts(const std::string& folder);

}  // namespace ddpx::train
