#include "data/shard_urls.h"

#include <cctype>
#include <sstream>

#include "core/error.h"
#include "data/http_range.h"

namespace ddpx::data {
namespace {

// More shards than any set of tar shards has: a typo such as {0..99999999} stops here.
constexpr size_t kMaxUrls = 1000000;

// `flag`: the option the URLs came from (--data_url, --val_url).
[[noreturn]] void bad_pattern(const std::string& flag, const std::string& pattern,
                              const std::string& why) {
  fail(ErrorKind::kUsage,
       "{} {}: {}; expected URLs such as http://host/shards/train-{{000000..000099}}.tar", flag,
       pattern, why);
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// The alternatives of one brace's content: "000..003" or "a,b,c".
std::vector<std::string> alternatives(const std::string& flag, const std::string& inside,
                                      const std::string& pattern) {
  std::vector<std::string> out;
  const size_t dots = inside.find("..");
  if (dots != std::string::npos) {
    const std::string lo = inside.substr(0, dots), hi = inside.substr(dots + 2);
    if (!all_digits(lo) || !all_digits(hi) || lo.size() > 18 || hi.size() > 18)
      bad_pattern(flag, pattern, "the range {" + inside + "} is not two numbers");
    const long long a = std::stoll(lo), b = std::stoll(hi);
    if (a > b) bad_pattern(flag, pattern, "the range {" + inside + "} runs backwards");
    if (static_cast<unsigned long long>(b - a) >= kMaxUrls)
      bad_pattern(flag, pattern, "the range {" + inside + "} names over a million shards");
    // braceexpand's padding: as wide as a bound written with a leading zero.
    const size_t width = (lo.size() > 1 && lo[0] == '0') || (hi.size() > 1 && hi[0] == '0')
                             ? std::max(lo.size(), hi.size())
                             : 0;
    for (long long k = a; k <= b; ++k) {
      std::string n = std::to_string(k);
      if (n.size() < width) n.insert(0, width - n.size(), '0');
      out.push_back(n);
    }
    return out;
  }
  std::string piece;
  for (char c : inside) {
    if (c == ',') {
      out.push_back(piece);
      piece.clear();
    } else {
      piece += c;
    }
  }
  out.push_back(piece);
  return out;
}

void expand(const std::string& flag, const std::string& rest, const std::string& prefix,
            const std::string& pattern, std::vector<std::string>& out) {
  const size_t open = rest.find('{');
  const size_t stray = rest.find('}');
  if (open == std::string::npos) {
    if (stray != std::string::npos) bad_pattern(flag, pattern, "a '}' without its '{'");
    out.push_back(prefix + rest);
    if (out.size() > kMaxUrls) bad_pattern(flag, pattern, "it names over a million shards");
    return;
  }
  const size_t close = rest.find('}', open);
  if (close == std::string::npos || stray < open) bad_pattern(flag, pattern, "unbalanced braces");
  const std::string inside = rest.substr(open + 1, close - open - 1);
  if (inside.find('{') != std::string::npos) bad_pattern(flag, pattern, "braces inside braces");
  for (const std::string& alt : alternatives(flag, inside, pattern))
    expand(flag, rest.substr(close + 1), prefix + rest.substr(0, open) + alt, pattern, out);
}

}  // namespace

std::vector<std::string> expand_shard_urls(const std::string& text, const std::string& flag) {
  std::vector<std::string> urls;
  std::istringstream words(text);
  for (std::string pattern; words >> pattern;) {
    if (!is_url(pattern))
      bad_pattern(flag, pattern,
                  fmt::format("not an http:// or https:// URL (local shards: {} DIR)",
                              flag == "--val_url" ? "--val_dir" : "--data_dir"));
    expand(flag, pattern, "", pattern, urls);
  }
  if (urls.empty()) bad_pattern(flag, "''", "no URL");
  return urls;
}

std::string url_folder(const std::string& url) { return url.substr(0, url.rfind('/')); }

}  // namespace ddpx::data
