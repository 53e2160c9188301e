#include "data/image_index.h"

#include <sys/stat.h>

#include <atomic>
#include <climits>
#include <cstdio>
#include <cstring>
#include <ctime>
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

// Version 2: the listing's checksum reads folders, not files (version 1 stat-ed every file).
constexpr char kCacheMagic[8] = {'D', 'D', 'P', 'X', 'I', 'D', 'X', '2'};
constexpr size_t kCacheHeader = 32;  // magic, checksum, count, listed_at_ns
// A folder changed this close before its listing was read is not trusted to be unchanged since
// (above): ten ticks of Linux's coarsest clock (HZ=100), which file times come from.
constexpr int64_t kRacyChangeNs = 100000000;
constexpr size_t kCacheRecord = 20;  // bytes u64, height u32, width u32, format u8, readable u8,
                                     // 2 spare

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

// The header of one file into `record` (its bytes known): its first 64 KiB, and the whole file
// when the header runs past them (a large EXIF block). Returns why it cannot be read, or "".
std::string read_header(const std::string& path, ImageRecord& record) {
  record.readable = true;
  try {
    const std::string start = read_prefix(path, io::kImageHeaderBytes);
    io::ImageInfo info;
    try {
      info = io::read_image_info(start, path);
    } catch (const Error&) {
      if (static_cast<int64_t>(start.size()) >= record.bytes) throw;
      info = io::read_image_info(read_prefix(path, 0), path);
    }
    record.format = info.format;
    record.height = static_cast<int32_t>(info.height);
    record.width = static_cast<int32_t>(info.width);
    return "";
  } catch (const Error& e) {
    record.readable = false;
    try {
      record.format = io::detect_image_format(read_prefix(path, 16));
    } catch (const Error&) {
      record.format = io::ImageFormat::kUnknown;  // cannot even be opened: e.what() says so
    }
    return e.what();
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

std::string format_index_cache(const std::vector<ImageRecord>& records, uint64_t checksum,
                               int64_t listed_at_ns) {
  std::string out(index_detail::kCacheMagic, sizeof(index_detail::kCacheMagic));
  out.reserve(index_detail::kCacheHeader + records.size() * index_detail::kCacheRecord);
  index_detail::put_u64(out, checksum);
  index_detail::put_u64(out, records.size());
  index_detail::put_u64(out, static_cast<uint64_t>(listed_at_ns));
  for (const auto& r : records) {
    index_detail::put_u64(out, static_cast<uint64_t>(r.bytes));
    index_detail::put_u32(out, static_cast<uint32_t>(r.height));
    index_detail::put_u32(out, static_cast<uint32_t>(r.width));
    out.push_back(static_cast<char>(r.format));
    out.push_back(r.readable ? 1 : 0);
    out.append(2, '\0');
  }
  return out;
}

std::optional<std::vector<ImageRecord>> parse_index_cache(std::string_view bytes, uint64_t count,
                                                          uint64_t checksum,
                                                          int64_t newest_change_ns) {
  if (bytes.size() < index_detail::kCacheHeader ||
      bytes.compare(0, 8, index_detail::kCacheMagic, 8) != 0)
    return std::nullopt;
  if (index_detail::get<uint64_t>(bytes, 8) != checksum ||
      index_detail::get<uint64_t>(bytes, 16) != count)
    return std::nullopt;
  const auto listed_at_ns = index_detail::get<uint64_t>(bytes, 24);
  if (listed_at_ns > static_cast<uint64_t>(INT64_MAX) ||
      static_cast<int64_t>(listed_at_ns) < index_detail::kRacyChangeNs ||
      newest_change_ns > static_cast<int64_t>(listed_at_ns) - index_detail::kRacyChangeNs)
    return std::nullopt;
  if ((bytes.size() - index_detail::kCacheHeader) / index_detail::kCacheRecord != count ||
      (bytes.size() - index_detail::kCacheHeader) % index_detail::kCacheRecord != 0)
    return std::nullopt;
  std::vector<ImageRecord> records(count);
  for (uint64_t i = 0; i < count; ++i) {
    const size_t at = index_detail::kCacheHeader + i * index_detail::kCacheRecord;
    const auto format = static_cast<uint8_t>(bytes[at + 16]);
    const auto readable = static_cast<uint8_t>(bytes[at + 17]);
    const auto file_bytes = index_detail::get<uint64_t>(bytes, at);
    const auto height = index_detail::get<uint32_t>(bytes, at + 8);
    const auto width = index_detail::get<uint32_t>(bytes, at + 12);
    if (format > static_cast<uint8_t>(io::ImageFormat::kPnm) || readable > 1 ||
        file_bytes > static_cast<uint64_t>(INT64_MAX) || height > INT32_MAX || width > INT32_MAX)
      return std::nullopt;
    records[i].bytes = static_cast<int64_t>(file_bytes);
    records[i].height = static_cast<int32_t>(height);
    records[i].width = static_cast<int32_t>(width);
    records[i].format = static_cast<io::ImageFormat>(format);
    records[i].readable = readable == 1;
  }
  return records;
}

ImageIndex index_image_folder(const std::string& root, int threads) {
  Stopwatch watch;
  ImageIndex index;
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  const int64_t listed_at_ns = static_cast<int64_t>(now.tv_sec) * 1000000000 + now.tv_nsec;
  index.listing = list_image_folder(root);
  const PathList& paths = index.listing.paths;
  const size_t n = paths.size();
  const std::string cache_path = index_cache_path(index.listing.root);
  std::optional<std::vector<ImageRecord>> cached;
  struct stat st;
  if (stat(cache_path.c_str(), &st) == 0) {
    try {
      cached = parse_index_cache(read_file(cache_path), n, index.listing.checksum,
                                 index.listing.newest_change_ns);
    } catch (const Error&) {
    }
  }
  if (cached) {
    index.records = std::move(*cached);
    index.from_cache = true;
    for (size_t i = 0; i < n; ++i)  // read again for the reason (few, or training refuses)
      if (!index.records[i].readable) {
        std::string error = index_detail::read_header(paths[i], index.records[i]);
        if (!error.empty()) index.errors.emplace(i, std::move(error));
      }
  } else {
    index.records.resize(n);
    std::mutex errors_mutex;
    index_detail::parallel_for(n, threads, [&](size_t i) {
      const std::string path = paths[i];
      ImageRecord& record = index.records[i];
      struct stat file;
      if (stat(path.c_str(), &file) == 0) record.bytes = file.st_size;  // else its read says why
      std::string error = index_detail::read_header(path, record);
      if (error.empty()) return;
      std::lock_guard<std::mutex> lock(errors_mutex);
      index.errors.emplace(i, std::move(error));
    });
    try {
      write_file_atomic(cache_path,
                        format_index_cache(index.records, index.listing.checksum, listed_at_ns));
    } catch (const Error& e) {
      log::info("image index not cached ({}); the folder will be indexed again next time",
                e.what());
    }
  }
  index.seconds = watch.seconds();
  return index;
}

}  // namespace ddpx::data
