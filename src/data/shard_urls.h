// `--data_url` (and `--val_url`): the tar shards a run reads over HTTP(S), written as WebDataset
// writes them: a brace pattern (`http://host/shards/train-{000000..000099}.tar`, ranges keeping the
// first bound's zero padding, and `{a,b}` alternatives, as Python's braceexpand), or several URLs
// and patterns separated by white space. The shards are read as a folder's are
// (data/shard_dataset.h) through data/http_range.h.
#pragma once

#include <string>
#include <vector>

namespace ddpx::data {

// Every URL of `text` in order; throws kUsage naming `flag` (the option the text came from) for
// an unbalanced brace, a reversed or non-numeric range, a name that is not http:// or https://,
// or no URL at all.
std::vector<std::string> expand_shard_urls(const std::string& text,
                                           const std::string& flag = "--data_url");

// Where a URL's folder is: everything up to its last '/' (classes.txt is fetched from there).
std::string url_folder(const std::string& url);

}  // namespace ddpx::data
