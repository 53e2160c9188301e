// Reading tar shards over HTTP(S) with libcurl (`--data_url`, data/shard_urls.h): a shard's
// index and class names whole (small files), and a sample's bytes with a Range request at the
// offset the index gives, so that a sample is read in place over the network as a local shard's
// is with one pread, and a run from URLs sees exactly the batches a run from the same shards on
// disk sees. Nothing goes to disk; memory holds one sample a loader thread. Each thread keeps
// its own connection (libcurl's keep-alive), so a rank's reads reuse it.
//
// Every failure throws one ddpx::Error naming the URL and what to do, never hangs: an HTTP error
// status, a refused or unreachable connection (kIo), a transfer under 1 byte/s for
// DDPX_HTTP_STALL_S seconds (default 30; kTimeout), a body cut short (kData), a server that
// ignores the byte range and answers with the whole file (kData: ddpx needs Range requests).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ddpx::data {

// Seconds under 1 byte/s before a transfer is abandoned (DDPX_HTTP_STALL_S), and before a
// connection that does not open is.
long http_stall_seconds();
inline constexpr long kHttpStallSeconds = 30;

bool is_url(const std::string& path);  // http:// or https://

// The whole body of `url`; nullopt on HTTP 404 when `missing_ok` (any other failure throws).
std::optional<std::string> http_get(const std::string& url, bool missing_ok = false);

// `size` bytes at `offset` of `url` (a Range request); throws when fewer come back.
std::string http_read_range(const std::string& url, int64_t offset, int64_t size);

}  // namespace ddpx::data
