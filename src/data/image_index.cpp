#include "data/image_index.h"

#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/log.h"
#include "core/timer.h"

namespace ddpx::data {
namespace index_detail {

constexpr char kCacheMagic[8] = {'D', 'D', 'P', 'X', 'I', 'D', 'X', '1'};
constexpr size_t kCacheHeader = 24;  // magic, checksum, count
constexpr size_t kCacheRecord = 12;  // height u32, width u32, format u8, readable u8, 2 spare

// fn(i) for i in [0, n) on `threads` threads; the first exception is rethrown here.
void parallel_for(size_t n, int threads, const std::function<void(size_t)>& fn) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<size_t>(threads, std::max<size_t>(n, 1)));
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    for (size_t i; (i = next++) < n;) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
        next = n;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

// Up to `limit` bytes from the start of `path` (all of it for limit 0).
std::string read_prefix(const std::string& path, size_t limit) {
  if (limit == 0) return read_file(path);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  DDPX_CHECK(f, ErrorKind::kIo, "cannot open {}: {}", path, std::strerror(errno));
  std::string bytes(limit, '\0');
  const size_t got = std::fread(bytes.data(), 1, limit, f);
  std::fclose(f);
  bytes.resize(got);
  return bytes;
}

// The header of one file: its first 64 KiB, and the whole file when the header runs past them
// (a large EXIF block).
void read_header(const std::string& path, ImageRecord& record) {
  try {
    const std::string start = read_prefix(path, io::kImageHeaderBytes);
    try {
      const io::ImageInfo info = io::read_image_info(start, path);
      record.format = info.format;
      record.height = info.height;
      record.width = info.width;
      return;
    } catch (const Error&) {
      if (static_cast<int64_t>(start.size()) >= record.bytes) throw;
    }
    const io::ImageInfo info = io::read_image_info(read_prefix(path, 0), path);
    record.format = info.format;
    record.height = info.height;
    record.width = info.width;
  } catch (const Error& e) {
    record.format = io::detect_image_format(read_prefix(path, 16));
    record.error = e.what();
  }
}

void put_u32(std::string& out, uint32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }
void put_u64(std::string& out, uint64_t v) { out.append(reinterpret_cast<const char*>(&v), 8); }
template <typename T>
T get(std::string_view bytes, size_t offset) {
  T v;
  std::memcpy(&v, bytes.data() + offset, sizeof(T));
  return v;
}

}  // namespace index_detail

std::string index_cache_path(const std::string& root) { return root + "/.ddpx-index"; }

std::string format_index_cache(const std::vector<ImageRecord>& records, uint64_t checksum) {
  std::string out(index_detail::kCacheMagic, sizeof(index_detail::kCacheMagic));
  index_detail::put_u64(out, checksum);
  index_detail::put_u64(out, records.size());
  for (const auto& r : records) {
    index_detail::put_u32(out, static_cast<uint32_t>(r.height));
    index_detail::put_u32(out, static_cast<uint32_t>(r.width));
    out.push_back(static_cast<char>(r.format));
    out.push_back(r.error.empty() ? 1 : 0);
    out.append(2, '\0');
  }
  return out;
}

std::optional<std::vector<ImageRecord>> parse_index_cache(std::string_view bytes, uint64_t count,
                                                          uint64_t checksum) {
  if (bytes.size() < index_detail::kCacheHeader ||
      bytes.compare(0, 8, index_detail::kCacheMagic, 8) != 0)
    return std::nullopt;
  if (index_detail::get<uint64_t>(bytes, 8) != checksum ||
      index_detail::get<uint64_t>(bytes, 16) != count)
    return std::nullopt;
  if ((bytes.size() - index_detail::kCacheHeader) / index_detail::kCacheRecord != count ||
      (bytes.size() - index_detail::kCacheHeader) % index_detail::kCacheRecord != 0)
    return std::nullopt;
  std::vector<ImageRecord> records(count);
  for (uint64_t i = 0; i < count; ++i) {
    const size_t at = index_detail::kCacheHeader + i * index_detail::kCacheRecord;
    const auto format = static_cast<uint8_t>(bytes[at + 8]);
    const auto readable = static_cast<uint8_t>(bytes[at + 9]);
    if (format > static_cast<uint8_t>(io::ImageFormat::kPnm) || readable > 1) return std::nullopt;
    records[i].height = index_detail::get<uint32_t>(bytes, at);
    records[i].width = index_detail::get<uint32_t>(bytes, at + 4);
    records[i].format = static_cast<io::ImageFormat>(format);
    if (!readable) records[i].error = "unreadable";  // read again for the reason
  }
  return records;
}

ImageIndex index_image_folder(const std::string& root, int threads) {
  Stopwatch watch;
  ImageIndex index;
  index.listing = list_image_folder(root);
  const auto& paths = index.listing.paths;
  const size_t n = paths.size();
  index.records.resize(n);
  std::vector<int64_t> mtimes(n, -1);
  index_detail::parallel_for(n, threads, [&](size_t i) {
    struct stat st;
    if (stat(paths[i].c_str(), &st) != 0) return;  // a dangling link: its read says why
    index.records[i].bytes = st.st_size;
    mtimes[i] = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  });
  // FNV-1a over (path below root, size, mtime) of every file: a change detector.
  uint64_t checksum = 1469598103934665603ull;
  auto mix = [&](const void* data, size_t size) {
    for (size_t i = 0; i < size; ++i) {
      checksum ^= static_cast<const unsigned char*>(data)[i];
      checksum *= 1099511628211ull;
    }
  };
  for (size_t i = 0; i < n; ++i) {
    mix(paths[i].data() + index.listing.root.size(), paths[i].size() - index.listing.root.size());
    mix("", 1);
    mix(&index.records[i].bytes, 8);
    mix(&mtimes[i], 8);
  }
  const std::string cache_path = index_cache_path(index.listing.root);
  std::optional<std::vector<ImageRecord>> cached;
  struct stat st;
  if (stat(cache_path.c_str(), &st) == 0) {
    try {
      cached = parse_index_cache(read_file(cache_path), n, checksum);
    } catch (const Error&) {
    }
  }
  if (cached) {
    for (size_t i = 0; i < n; ++i) {
      (*cached)[i].bytes = index.records[i].bytes;
      if (!(*cached)[i].error.empty()) index_detail::read_header(paths[i], (*cached)[i]);
    }
    index.records = std::move(*cached);
    index.from_cache = true;
  } else {
    index_detail::parallel_for(
        n, threads, [&](size_t i) { index_detail::read_header(paths[i], index.records[i]); });
    try {
      write_file_atomic(cache_path, format_index_cache(index.records, checksum));
    } catch (const Error& e) {
      log::info("image index not cached ({}); the folder will be indexed again next time",
                e.what());
    }
  }
  index.seconds = watch.seconds();
  return index;
}

}  // namespace ddpx::data
