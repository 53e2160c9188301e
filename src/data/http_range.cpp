#include "data/http_range.h"

#include <curl/curl.h>

#include <memory>

#include "core/env.h"
#include "core/error.h"

namespace ddpx::data {
namespace {

using Handle = std::unique_ptr<CURL, void (*)(CURL*)>;

// This thread's handle: its connection stays open between requests to the same server.
CURL* thread_handle() {
  static const bool initialised = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  DDPX_CHECK(initialised, ErrorKind::kIo, "libcurl failed to initialise");
  thread_local Handle handle(curl_easy_init(), curl_easy_cleanup);
  DDPX_CHECK(handle != nullptr, ErrorKind::kIo, "libcurl failed to initialise");
  curl_easy_reset(handle.get());  // options only: the connection cache stays
  return handle.get();
}

struct Sink {
  CURL* curl = nullptr;
  std::string* out = nullptr;
  int64_t limit = -1;  // a ranged request: the bytes asked for
  bool ignored_range = false;
};

size_t append(char* data, size_t size, size_t count, void* user) {
  Sink& sink = *static_cast<Sink*>(user);
  const size_t n = size * count;
  if (sink.limit >= 0) {
    long status = 0;
    curl_easy_getinfo(sink.curl, CURLINFO_RESPONSE_CODE, &status);
    // A 200 to a Range request is the whole file coming: stop it at once.
    if (status != 206) {
      sink.ignored_range = true;
      return 0;
    }
    if (static_cast<int64_t>(sink.out->size() + n) > sink.limit) return 0;
  }
  sink.out->append(data, n);
  return n;
}

enum class Outcome { kBody, kMissing };

// Runs a GET of `url` (bytes `range` when not empty) into `out`; throws for any failure but a
// 404 when `missing_ok`.
Outcome perform(const std::string& url, const std::string& range, int64_t limit, std::string& out,
                bool missing_ok) {
  CURL* c = thread_handle();
  const long stall = http_stall_seconds();
  char error[CURL_ERROR_SIZE] = {0};
  Sink sink{c, &out, limit};
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
  curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, stall);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
  curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, stall);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, append);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(c, CURLOPT_USERAGENT, "ddpx/0.1");
  if (!range.empty()) curl_easy_setopt(c, CURLOPT_RANGE, range.c_str());
  const CURLcode rc = curl_easy_perform(c);
  if (rc == CURLE_OK) return Outcome::kBody;
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  const std::string detail = error[0] ? error : curl_easy_strerror(rc);
  switch (rc) {
    case CURLE_HTTP_RETURNED_ERROR:
      if (status == 404 && missing_ok) return Outcome::kMissing;
      if (status == 416)
        fail(ErrorKind::kData,
             "{}: HTTP 416 for bytes {}: the file on the server is shorter than its index says "
             "(cut short, or not the shard that was indexed); copy the shard and its .idx again",
             url, range);
      fail(ErrorKind::kData,
           "{}: HTTP {} from the server; check the URL (--data_url) and that "
           "the server holds the file",
           url, status);
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
      fail(ErrorKind::kIo,
           "{}: cannot connect ({}); is the server running, and are the host "
           "and port in --data_url right?",
           url, detail);
    case CURLE_OPERATION_TIMEDOUT:
      fail(ErrorKind::kTimeout,
           "{}: the transfer stalled (under 1 byte/s for {} s: {}); check "
           "the server, or give a slow link longer with DDPX_HTTP_STALL_S=SECONDS",
           url, stall, detail);
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
      fail(ErrorKind::kData,
           "{}: the connection ended before the body did ({}); the server "
           "or the file on it was cut short: check it and run again",
           url, detail);
    case CURLE_WRITE_ERROR:
      DDPX_CHECK(!sink.ignored_range, ErrorKind::kData,
                 "{}: the server ignored the byte range (HTTP {}, not 206 Partial Content); "
                 "ddpx reads each sample in place and needs a server that serves Range "
                 "requests (nginx, Apache, S3, GCS do; Python's http.server does not)",
                 url, status);
      fail(ErrorKind::kData,
           "{}: the server sent more than the {} bytes asked for ({}); is it "
           "the shard that was indexed?",
           url, limit, range);
    default:
      fail(ErrorKind::kIo, "{}: {}; check the URL (--data_url) and the network", url, detail);
  }
}

}  // namespace

long http_stall_seconds() {
  const long s = env::get_int_or("DDPX_HTTP_STALL_S", kHttpStallSeconds);
  DDPX_CHECK(s > 0, ErrorKind::kUsage,
             "DDPX_HTTP_STALL_S={}: expected the seconds (> 0) a shard transfer may make no "
             "progress before it is abandoned",
             s);
  return s;
}

bool is_url(const std::string& path) {
  return path.rfind("http://", 0) == 0 || path.rfind("https://", 0) == 0;
}

std::optional<std::string> http_get(const std::string& url, bool missing_ok) {
  std::string body;
  if (perform(url, "", -1, body, missing_ok) == Outcome::kMissing) return std::nullopt;
  return body;
}

std::string http_read_range(const std::string& url, int64_t offset, int64_t size) {
  std::string out;
  if (size == 0) return out;
  out.reserve(static_cast<size_t>(size));
  const std::string range = fmt::format("{}-{}", offset, offset + size - 1);
  perform(url, range, size, out, false);
  DDPX_CHECK(static_cast<int64_t>(out.size()) == size, ErrorKind::kData,
             "{}: {} of the {} bytes at {} came back: the shard on the server is shorter than "
             "its index says (cut mid-member); copy the shard and its .idx again",
             url, out.size(), size, offset);
  return out;
}

}  // namespace ddpx::data
