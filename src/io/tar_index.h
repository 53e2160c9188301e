// A tar shard's index (`SHARD.tar.idx`, written by `ddpx data pack` beside each shard): the
// members io::list_tar would list (name, data offset, size, a label's bytes), so that a start
// reads one small file instead of walking every member header of the shard (a million-sample
// set on a shared file system is tens of thousands of small reads a shard). Text: a line
// `ddpx-tar-index 1 TAR_BYTES MEMBERS`, then `OFFSET SIZE DATA NAME` a member (DATA the inline
// bytes in hex, `-` when none). An index is used only when it is whole and no older than its tar,
// and its tar's size is the one it records: anything else (a shard rewritten or touched after
// packing, a damaged or foreign index) reads as absent, and the caller lists the tar.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/tar_shard.h"

namespace ddpx::io {

std::string tar_index_path(const std::string& tar);  // TAR + ".idx"

// Writes `members` (list_tar(tar)'s) as tar's index, atomically.
void write_tar_index(const std::string& tar, const std::vector<TarMember>& members);

// The index of `tar` when it is there and current; nullopt otherwise (never throws for a bad
// index: the tar is listed instead).
std::optional<std::vector<TarMember>> read_tar_index(const std::string& tar);

// An index's text for a tar of `tar_bytes` bytes (negative: the size the index records, for a
// tar not at hand, such as a shard on an HTTP server): its members, or nullopt when it is not a
// whole index of such a tar (every member's data lies inside it). The fuzz entry point.
std::optional<std::vector<TarMember>> parse_tar_index(std::string_view text, int64_t tar_bytes);

}  // namespace ddpx::io
