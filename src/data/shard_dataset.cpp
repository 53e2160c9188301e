#include "data/shard_dataset.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "data/http_range.h"
#include "data/image_dataset.h"
#include "data/image_folder.h"
#include "data/shard_urls.h"
#include "data/transforms.h"
#include "data/val_split.h"
#include "io/tar_index.h"
#include "io/tar_shard.h"

namespace ddpx::data {
namespace shard_detail {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool starts_with(const std::string& s, const std::string& head) {
  return s.compare(0, head.size(), head) == 0;
}

// webdataset's key: the name up to the first dot of its file name (folders kept).
std::string key_of(const std::string& name, std::string& extension) {
  const size_t slash = name.rfind('/');
  const size_t dot = name.find('.', slash == std::string::npos ? 0 : slash + 1);
  if (dot == std::string::npos) {
    extension.clear();
    return name;
  }
  extension = name.substr(dot + 1);
  return name.substr(0, dot);
}

// A `.cls` member's text: a non-negative decimal, with white space around it allowed.
int64_t parse_label(const std::string& text, const std::string& where) {
  size_t i = 0, end = text.size();
  while (i < end && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  while (end > i && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  int64_t label = 0;
  bool ok = i < end && end - i <= 9;
  for (size_t k = i; ok && k < end; ++k) {
    ok = text[k] >= '0' && text[k] <= '9';
    label = label * 10 + (text[k] - '0');
  }
  DDPX_CHECK(ok, ErrorKind::kData,
             "{}: a label must be a class number in decimal (as webdataset writes `.cls`), got "
             "'{}'; write the shard again (`ddpx data pack`)",
             where, text.substr(0, 40));
  return label;
}

struct Samples {
  ImageFiles files;
  std::vector<int64_t> labels;
};

// Appends the samples of shard `number` at `path` (a file or a URL), whose members are these.
void add_members(const std::string& path, int32_t number, const std::vector<io::TarMember>& members,
                 Samples& out) {
  size_t i = 0;
  while (i < members.size()) {
    std::string extension;
    const std::string key = key_of(members[i].name, extension);
    const io::TarMember* image = nullptr;
    const io::TarMember* label = nullptr;
    for (; i < members.size(); ++i) {
      std::string ext;
      if (key_of(members[i].name, ext) != key) break;
      if (ext == "cls" && !label) label = &members[i];
      if (!image && has_image_extension("." + ext)) image = &members[i];
    }
    const std::string where = path + ":" + key;
    DDPX_CHECK(image && label, ErrorKind::kData,
               "{}: a sample without {}; each sample is KEY.jpg (or .png, ...) and KEY.cls "
               "(its class number) next to each other in the tar",
               where, image ? "a .cls label" : "an image");
    DDPX_CHECK(label->size <= io::kTarInlineBytes, ErrorKind::kData,
               "{}.cls: {} bytes; a label is a class number", where, label->size);
    ImageRecord record;
    record.bytes = image->size;
    out.files.paths.push_back(path);
    out.files.records.push_back(record);
    out.files.offsets.push_back(image->offset);
    out.files.members.push_back(image->name);
    out.files.shards.push_back(number);
    out.labels.push_back(parse_label(label->data, where + ".cls"));
  }
}

// Appends shard `number`'s samples.
void add_shard(const std::string& path, int32_t number, Samples& out) {
  // `ddpx data pack`'s index when it is current, else the tar's own headers.
  std::optional<std::vector<io::TarMember>> indexed = io::read_tar_index(path);
  add_members(path, number, indexed ? std::move(*indexed) : io::list_tar(path), out);
}

Samples list_shards(const std::vector<std::string>& shards) {
  Samples s;
  for (size_t k = 0; k < shards.size(); ++k) add_shard(shards[k], static_cast<int32_t>(k), s);
  return s;
}

// The same for shards on an HTTP server: their members from the index beside each (the tar
// itself is never walked over the network), which must be there.
Samples list_shard_urls(const std::vector<std::string>& urls) {
  Samples s;
  for (size_t k = 0; k < urls.size(); ++k) {
    const std::string index_url = io::tar_index_path(urls[k]);
    const std::optional<std::string> text = http_get(index_url, /*missing_ok=*/true);
    DDPX_CHECK(text, ErrorKind::kData,
               "{}: HTTP 404: no index beside the shard {}; a shard read from a URL needs the "
               "SHARD.tar.idx that `ddpx data pack` writes beside it (the sample counts that "
               "give every rank the same number of batches): serve it there too",
               index_url, urls[k]);
    std::optional<std::vector<io::TarMember>> members = io::parse_tar_index(*text, -1);
    DDPX_CHECK(members, ErrorKind::kData,
               "{}: not a whole ddpx tar index; write the shards again (`ddpx data pack`) and "
               "serve each with its .idx",
               index_url);
    add_members(urls[k], static_cast<int32_t>(k), *members, s);
  }
  return s;
}

// Samples `picks` of `all` (in that order) as a streamed Dataset.
Dataset make_split(const Samples& all, const std::vector<size_t>& picks,
                   const std::vector<std::string>& classes, const std::string& root) {
  auto files = std::make_shared<ImageFiles>();
  files->root = root;
  std::vector<int64_t> labels;
  for (size_t i : picks) {
    files->paths.push_back(all.files.paths[i]);
    files->records.push_back(all.files.records[i]);
    files->offsets.push_back(all.files.offsets[i]);
    files->members.push_back(all.files.members[i]);
    files->shards.push_back(all.files.shards[i]);
    labels.push_back(all.labels[i]);
  }
  Dataset d;
  d.name = "shards";
  d.labels = torch::tensor(labels, torch::kInt64);
  d.num_classes = static_cast<int64_t>(classes.size());
  d.class_names = classes;
  d.files = std::move(files);
  return d;
}

std::vector<size_t> all(size_t n) {
  std::vector<size_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

// classes.txt's names, or "0".."max label" without it; every label checked against them.
// Beside shards on a server, `dir` is a URL.
std::vector<std::string> class_names(const std::string& dir, const Samples& train,
                                     const Samples* val) {
  std::vector<std::string> classes;
  const std::string file = dir + "/" + kShardClassesFile;
  std::istringstream served;
  std::ifstream local;
  if (is_url(dir)) {
    if (auto text = http_get(file, /*missing_ok=*/true))
      served.str(*text);
    else
      served.setstate(std::ios::failbit);
  } else {
    local.open(file);
  }
  std::istream& in = is_url(dir) ? static_cast<std::istream&>(served) : local;
  if (in) {
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) classes.push_back(line);
  } else {
    int64_t top = -1;
    for (int64_t l : train.labels) top = std::max(top, l);
    if (val)
      for (int64_t l : val->labels) top = std::max(top, l);
    for (int64_t k = 0; k <= top; ++k) classes.push_back(std::to_string(k));
  }
  for (const Samples* s : {&train, val}) {
    if (!s) continue;
    for (size_t i = 0; i < s->labels.size(); ++i)
      DDPX_CHECK(s->labels[i] < static_cast<int64_t>(classes.size()), ErrorKind::kData,
                 "{}: label {} but {} names {} classes; write the shards and {} again (`ddpx "
                 "data pack`)",
                 s->files.name(static_cast<int64_t>(i)), s->labels[i], file, classes.size(),
                 kShardClassesFile);
  }
  return classes;
}

}  // namespace shard_detail

std::vector<std::string> find_shards(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> named, other;
  if (DIR* d = opendir(dir.c_str())) {
    while (const dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (!shard_detail::ends_with(name, ".tar")) continue;
      if (shard_detail::starts_with(name, prefix + "-"))
        named.push_back(dir + "/" + name);
      else if (!shard_detail::starts_with(name, "val-"))
        other.push_back(dir + "/" + name);
    }
    closedir(d);
  }
  std::vector<std::string>& out = named.empty() && prefix == "train" ? other : named;
  std::sort(out.begin(), out.end());
  return out;
}

namespace shard_detail {

// Both splits from the listed training shards (at `where`: their folder, or their URLs' folder,
// where classes.txt is) and, when there are any, the validation shards.
DatasetSplits make_splits(const DatasetSpec& spec, const std::string& where, const Samples& train,
                          size_t train_shards, const Samples* val, size_t val_shards) {
  DatasetSplits splits;
  splits.mean.assign(kImagenetMean, kImagenetMean + 3);
  splits.std.assign(kImagenetStd, kImagenetStd + 3);
  const size_t n = train.labels.size();
  DDPX_CHECK(n > 0, ErrorKind::kData, "{}: its {} shard(s) hold no sample", where, train_shards);
  if (!spec.with_validation) {  // the training shards alone (a benchmark's): no test split
    const auto classes = class_names(where, train, nullptr);
    splits.train = make_split(train, all(n), classes, where);
    splits.test = make_split(train, {}, classes, where);
    splits.source = fmt::format("{} ({} training shards)", where, train_shards);
    return splits;
  }
  if (val) {
    const auto classes = class_names(where, train, val);
    splits.train = make_split(train, all(n), classes, where);
    splits.test = make_split(*val, all(val->labels.size()), classes, where);
    splits.source = fmt::format("{} ({} training shards, {} validation shards)", where,
                                train_shards, val_shards);
    return splits;
  }
  DDPX_CHECK(spec.val_split > 0 && spec.val_split < 1, ErrorKind::kUsage,
             "--val_split {}: expected a fraction in (0, 1) of the samples in {} held out for "
             "validation, or val-*.tar shards there, or --val_dir DIR",
             spec.val_split, where);
  DDPX_CHECK(n >= 2, ErrorKind::kData, "{}: {} sample; --val_split needs at least 2", where, n);
  const auto classes = class_names(where, train, nullptr);
  const HeldOut held = hold_out(n, spec.val_split);
  splits.train = make_split(train, held.train, classes, where);
  splits.test = make_split(train, held.val, classes, where);
  splits.source = fmt::format("{} ({} shards, {:g} held out for validation)", where, train_shards,
                              spec.val_split);
  return splits;
}

}  // namespace shard_detail

DatasetSplits load_shard_dataset(const DatasetSpec& spec, const std::string& given_dir) {
  DDPX_CHECK(spec.val_url.empty() || spec.val_dir.empty(), ErrorKind::kUsage,
             "--val_url {} and --val_dir {}: give one of them (the validation shards' URLs, or "
             "their folder)",
             spec.val_url, spec.val_dir);
  if (!spec.data_url.empty()) return load_shard_urls(spec);
  std::string dir = given_dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const std::vector<std::string> train_shards = find_shards(dir, "train");
  DDPX_CHECK(!train_shards.empty(), ErrorKind::kData,
             "{}: no tar shard (train-000000.tar, ...); write them from an image folder with "
             "`ddpx data pack IMAGE_FOLDER --out {}`",
             dir, dir);
  std::vector<std::string> val_shards =
      spec.val_dir.empty() ? find_shards(dir, "val") : find_shards(spec.val_dir, "val");
  if (!spec.val_dir.empty() && val_shards.empty()) val_shards = find_shards(spec.val_dir, "train");
  DDPX_CHECK(spec.val_dir.empty() || !val_shards.empty(), ErrorKind::kData,
             "--val_dir {}: no tar shard in it (val-000000.tar, ...)", spec.val_dir);
  const shard_detail::Samples train = shard_detail::list_shards(train_shards);
  if (!spec.val_url.empty()) {
    const std::vector<std::string> val_urls = expand_shard_urls(spec.val_url, "--val_url");
    const shard_detail::Samples val = shard_detail::list_shard_urls(val_urls);
    return shard_detail::make_splits(spec, dir, train, train_shards.size(), &val, val_urls.size());
  }
  if (val_shards.empty())
    return shard_detail::make_splits(spec, dir, train, train_shards.size(), nullptr, 0);
  const shard_detail::Samples val = shard_detail::list_shards(val_shards);
  return shard_detail::make_splits(spec, dir, train, train_shards.size(), &val, val_shards.size());
}

DatasetSplits load_shard_urls(const DatasetSpec& spec) {
  const std::vector<std::string> urls = expand_shard_urls(spec.data_url);
  const shard_detail::Samples train = shard_detail::list_shard_urls(urls);
  const std::string where = url_folder(urls.front());
  if (!spec.val_url.empty()) {  // the validation shards on a server too (the same checks)
    const std::vector<std::string> val_urls = expand_shard_urls(spec.val_url, "--val_url");
    const shard_detail::Samples val = shard_detail::list_shard_urls(val_urls);
    return shard_detail::make_splits(spec, where, train, urls.size(), &val, val_urls.size());
  }
  if (spec.val_dir.empty())
    return shard_detail::make_splits(spec, where, train, urls.size(), nullptr, 0);
  std::vector<std::string> val_shards = find_shards(spec.val_dir, "val");
  if (val_shards.empty()) val_shards = find_shards(spec.val_dir, "train");
  DDPX_CHECK(!val_shards.empty(), ErrorKind::kData,
             "--val_dir {}: no tar shard in it (val-000000.tar, ...)", spec.val_dir);
  const shard_detail::Samples val = shard_detail::list_shards(val_shards);
  return shard_detail::make_splits(spec, where, train, urls.size(), &val, val_shards.size());
}

}  // namespace ddpx::data
