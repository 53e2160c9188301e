#include "data/image_folder_info.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace ddpx::data {
namespace folder_info_detail {

// "min / 10% / median / 90% / max" of `v` (sorted here).
std::string quantiles(std::vector<int64_t> v) {
  if (v.empty()) return "-";
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))]; };
  return fmt::format("{} / {} / {} / {} / {}", v.front(), at(0.1), at(0.5), at(0.9), v.back());
}

}  // namespace folder_info_detail

std::vector<std::string> describe_image_folder(const ImageIndex& index) {
  const auto& l = index.listing;
  std::vector<std::string> lines;
  int64_t bytes = 0;
  std::vector<int64_t> per_class(l.classes.size(), 0), widths, heights, pixels;
  std::map<std::string, int64_t> formats;
  std::vector<std::string> unreadable;
  for (size_t i = 0; i < l.paths.size(); ++i) {
    const ImageRecord& r = index.records[i];
    ++per_class[l.labels[i]];
    bytes += r.bytes;
    if (!r.readable) {
      auto reason = index.errors.find(i);
      unreadable.push_back(reason != index.errors.end() ? reason->second : l.paths[i]);
      continue;
    }
    ++formats[io::name(r.format)];
    widths.push_back(r.width);
    heights.push_back(r.height);
    pixels.push_back(static_cast<int64_t>(r.width) * r.height);
  }
  lines.push_back(fmt::format("{}: {} classes, {} images, {:.1f} MiB; indexed in {:.2f} s{}",
                              l.root, l.classes.size(), l.paths.size(), bytes / 1048576.0,
                              index.seconds, index.from_cache ? " (from its cache)" : ""));
  size_t name_width = 5;
  for (const auto& c : l.classes) name_width = std::max(name_width, c.size());
  lines.push_back(fmt::format("{:<{}}  images", "class", name_width));
  for (size_t k = 0; k < l.classes.size(); ++k)
    lines.push_back(fmt::format("{:<{}}  {}", l.classes[k], name_width, per_class[k]));
  std::string found;
  for (const auto& [format, count] : formats)
    found += fmt::format("{}{} {}", found.empty() ? "" : ", ", format, count);
  lines.push_back("formats: " + (found.empty() ? std::string("none readable") : found));
  lines.push_back("width  (min / 10% / median / 90% / max): " +
                  folder_info_detail::quantiles(widths));
  lines.push_back("height (min / 10% / median / 90% / max): " +
                  folder_info_detail::quantiles(heights));
  lines.push_back("megapixels (median): " + fmt::format(
                                                "{:.2f}", pixels.empty() ? 0.0 : [&] {
                                                  std::vector<int64_t> p = pixels;
                                                  std::nth_element(
                                                      p.begin(), p.begin() + p.size() / 2, p.end());
                                                  return p[p.size() / 2] / 1e6;
                                                }()));
  lines.push_back(fmt::format("unreadable: {}", unreadable.size()));
  for (const auto& u : unreadable) lines.push_back("  " + u);
  return lines;
}

}  // namespace ddpx::data
