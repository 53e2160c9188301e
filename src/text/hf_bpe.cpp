#include "text/hf_bpe.h"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>
#include <vector>

#include "core/atomic_file.h"
#include "core/error.h"
#include "text/utf8.h"

namespace ddpx::text {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kMaxId = (int64_t{1} << 31) - 1;  // ids are int32 in token files

// GPT-2's bytes_to_unicode: the printable bytes stand for themselves, the other 68 for the code
// points 256, 257, ... in byte order. byte_of: the byte each code point of the alphabet stands for.
const std::unordered_map<uint32_t, uint8_t>& byte_of() {
  static const std::unordered_map<uint32_t, uint8_t> table = [] {
    std::unordered_map<uint32_t, uint8_t> t;
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 255 && b != 173);
      t.emplace(printable ? static_cast<uint32_t>(b) : next++, static_cast<uint8_t>(b));
    }
    return t;
  }();
  return table;
}

// The bytes a token of the alphabet spells; false for a character outside it.
bool to_bytes(std::string_view token, std::string& out) {
  out.clear();
  for (size_t at = 0; at < token.size();) {
    size_t n = utf8_char_length(token, at);
    if (n == 0) return false;
    auto it = byte_of().find(utf8_code_point(token, at, n));
    if (it == byte_of().end()) return false;
    out.push_back(static_cast<char>(it->second));
    at += n;
  }
  return !out.empty();
}

// A merge: its two tokens as the files spell them, and where it was read (for errors).
struct Merge {
  std::string left, right;
  std::string where;  // "merges.txt line 12", "tokenizer.json merge 10"
};

std::unordered_map<std::string, int64_t> read_vocab(const nlohmann::json& json,
                                                    const std::string& source) {
  DDPX_CHECK(json.is_object() && !json.empty(), ErrorKind::kData,
             "{}: the vocabulary is not an object of token -> id; give GPT-2's tokenizer files",
             source);
  std::unordered_map<std::string, int64_t> id_of;
  id_of.reserve(json.size());
  for (auto& [token, id] : json.items()) {
    DDPX_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() <= kMaxId,
               ErrorKind::kData,
               "{}: the vocabulary gives \"{}\" the id {}, expected a number in 0..{}", source,
               token, id.dump(), kMaxId);
    id_of.emplace(token, id.get<int64_t>());
  }
  return id_of;
}

// The rank table of a vocabulary and its merges (see hf_bpe.h for what is checked).
io::RankFile rank_table(const std::unordered_map<std::string, int64_t>& id_of,
                        const std::vector<Merge>& merges, const std::string& source) {
  // Ids are ranks: tokens[id] spells the token; <|endoftext|> may follow them as the last id.
  const std::string end_of_text = "<|endoftext|>";
  auto eot = id_of.find(end_of_text);
  const size_t count = id_of.size() - (eot != id_of.end() ? 1 : 0);
  DDPX_CHECK(
      eot == id_of.end() || eot->second == static_cast<int64_t>(count), ErrorKind::kData,
      "{}: the vocabulary gives <|endoftext|> the id {}, expected {}, the id after the other "
      "tokens (GPT-2's 50256)",
      source, eot == id_of.end() ? 0 : eot->second, count);
  io::RankFile ranks;
  ranks.tokens.resize(count);
  std::vector<bool> taken(count, false);
  size_t single_bytes = 0;
  for (const auto& [token, id] : id_of) {
    if (token == end_of_text) continue;
    DDPX_CHECK(
        id < static_cast<int64_t>(count) && !taken[id], ErrorKind::kData,
        "{}: the vocabulary gives \"{}\" the id {}, which is {}; the ids of its {} tokens must "
        "be 0..{}, each once",
        source, token, id, id < static_cast<int64_t>(count) ? "given twice" : "too large", count,
        count - 1);
    DDPX_CHECK(to_bytes(token, ranks.tokens[id]), ErrorKind::kData,
               "{}: the vocabulary's \"{}\" is not spelled in GPT-2's byte alphabet; give the "
               "vocab.json of a byte-level BPE (GPT-2's)",
               source, token);
    taken[id] = true;
    single_bytes += ranks.tokens[id].size() == 1;
  }
  DDPX_CHECK(single_bytes == 256, ErrorKind::kData,
             "{}: the vocabulary holds {} of the 256 single bytes, so byte-level BPE cannot spell "
             "every text; give GPT-2's vocab.json",
             source, single_bytes);
  // Each merge makes a token of the vocabulary, in the order of the ids (so that an id is the
  // token's merge priority, as tiktoken ranks them), and every longer token is made by one.
  std::vector<bool> made(count, false);
  int64_t last_id = -1;
  std::string bytes;
  for (const Merge& m : merges) {
    DDPX_CHECK(to_bytes(m.left, bytes) && to_bytes(m.right, bytes), ErrorKind::kData,
               "{}: {} is not two tokens of GPT-2's byte alphabet; give the merges saved with "
               "this vocabulary",
               source, m.where);
    auto it = id_of.find(m.left + m.right);
    DDPX_CHECK(it != id_of.end() && it->first != end_of_text, ErrorKind::kData,
               "{}: {} makes a token the vocabulary does not hold; give the vocabulary and merges "
               "saved together",
               source, m.where);
    DDPX_CHECK(it->second >= last_id, ErrorKind::kData,
               "{}: {} makes \"{}\" (id {}) after a merge made id {}; ddpx reads the byte-level "
               "BPE vocabularies whose ids are their merge order (GPT-2's)",
               source, m.where, it->first, it->second, last_id);
    last_id = it->second;
    made[it->second] = true;
  }
  for (size_t id = 0; id < count; ++id)
    DDPX_CHECK(made[id] || ranks.tokens[id].size() == 1, ErrorKind::kData,
               "{}: the token of id {} is made by no merge; give the "
               "vocab.json and merges.txt saved together",
               source, id);
  return ranks;
}

// merges.txt: an optional "#version" line, then "LEFT RIGHT" a line.
std::vector<Merge> read_merges_txt(std::string_view text, const std::string& source) {
  std::vector<Merge> merges;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.substr(0, 9) == "#version:")) continue;
    const size_t space = line.find(' ');
    DDPX_CHECK(space != std::string_view::npos && line.find(' ', space + 1) == line.npos,
               ErrorKind::kData,
               "{}: merges.txt line {} is not two tokens with a space between; give the "
               "merges.txt saved with this vocab.json",
               source, line_no);
    merges.push_back({std::string(line.substr(0, space)), std::string(line.substr(space + 1)),
                      fmt::format("merges.txt line {}", line_no)});
  }
  return merges;
}

nlohmann::json parse_json(std::string_view bytes, const std::string& source) {
  try {
    return nlohmann::json::parse(bytes);
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorKind::kData,
         "{}: not JSON ({}); give the tokenizer files transformers saved for a GPT-2", source,
         e.what());
  }
}

}  // namespace

io::RankFile parse_hf_bpe(std::string_view vocab_json, std::string_view merges_txt,
                          const std::string& source) {
  return rank_table(read_vocab(parse_json(vocab_json, source), source),
                    read_merges_txt(merges_txt, source), source);
}

io::RankFile parse_hf_tokenizer_json(std::string_view bytes, const std::string& source) {
  const nlohmann::json json = parse_json(bytes, source);
  const auto* model = json.is_object() && json.contains("model") ? &json["model"] : nullptr;
  DDPX_CHECK(model != nullptr && model->is_object() && model->value("type", "") == "BPE" &&
                 model->contains("vocab") && model->contains("merges") &&
                 (*model)["merges"].is_array(),
             ErrorKind::kData,
             "{}: not a tokenizer.json of a BPE model (\"model\": {{\"type\": \"BPE\", \"vocab\", "
             "\"merges\"}}); give a GPT-2 tokenizer's",
             source);
  std::vector<Merge> merges;
  for (const auto& m : (*model)["merges"]) {
    std::string where = fmt::format("tokenizer.json merge {}", merges.size() + 1);
    if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.push_back({m[0].get<std::string>(), m[1].get<std::string>(), std::move(where)});
      continue;
    }
    // Older files spell a merge as one string, "LEFT RIGHT".
    const std::string line = m.is_string() ? m.get<std::string>() : std::string();
    const size_t space = line.find(' ');
    DDPX_CHECK(space != std::string::npos && line.find(' ', space + 1) == std::string::npos,
               ErrorKind::kData, "{}: {} is neither [LEFT, RIGHT] nor \"LEFT RIGHT\"", source,
               where);
    merges.push_back({line.substr(0, space), line.substr(space + 1), std::move(where)});
  }
  std::unordered_map<std::string, int64_t> id_of = read_vocab((*model)["vocab"], source);
  // GPT-2's <|endoftext|> is an added token, outside the model's vocabulary.
  if (json.contains("added_tokens") && json["added_tokens"].is_array())
    for (const auto& added : json["added_tokens"])
      if (added.is_object() && added.value("content", "") == "<|endoftext|>" &&
          added.contains("id") && added["id"].is_number_integer())
        id_of.emplace("<|endoftext|>", added["id"].get<int64_t>());
  return rank_table(id_of, merges, source);
}

bool is_hf_bpe(const std::string& path) {
  std::error_code ec;
  fs::path p(path);
  if (fs::is_directory(p, ec))
    return fs::is_regular_file(p / "tokenizer.json", ec) ||
           (fs::is_regular_file(p / "vocab.json", ec) && fs::is_regular_file(p / "merges.txt", ec));
  if (p.filename() == "tokenizer.json") return fs::is_regular_file(p, ec);
  return fs::is_regular_file(p, ec) && fs::is_regular_file(p.parent_path() / "merges.txt", ec);
}

io::RankFile read_hf_bpe(const std::string& path) {
  std::error_code ec;
  fs::path p(path);
  if (fs::is_directory(p, ec)) {
    // vocab.json + merges.txt where a folder holds them (the older files, read by the most
    // transformers versions alike), else tokenizer.json.
    const bool pair =
        fs::is_regular_file(p / "vocab.json", ec) && fs::is_regular_file(p / "merges.txt", ec);
    p /= pair ? "vocab.json" : "tokenizer.json";
  }
  DDPX_CHECK(fs::is_regular_file(p, ec), ErrorKind::kData,
             "{}: no such file; a Hugging Face GPT-2 tokenizer is tokenizer.json, or vocab.json "
             "and merges.txt, in one folder (as save_pretrained writes them)",
             p.string());
  if (p.filename() == "tokenizer.json")
    return parse_hf_tokenizer_json(read_file(p.string()), p.string());
  const fs::path merges = p.parent_path() / "merges.txt";
  DDPX_CHECK(fs::is_regular_file(merges, ec), ErrorKind::kData,
             "{}: no such file; Hugging Face's vocab.json needs the merges.txt saved with it",
             merges.string());
  return parse_hf_bpe(read_file(p.string()), read_file(merges.string()), p.string());
}

}  // namespace ddpx::text
