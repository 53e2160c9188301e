#include "text/tokenize.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "core/atomic_file.h"
#include "core/error.h"
#include "io/token_file.h"
#include "text/bpe.h"
#include "text/char_tokenizer.h"
#include "text/gpt2_pattern.h"
#include "text/utf8.h"
#include "text/wordpiece.h"

namespace ddpx::text {
namespace {

namespace fs = std::filesystem;

// One stretch of one document, tokenized by one thread.
struct Chunk {
  size_t document;
  size_t begin;
  size_t end;
  bool first;  // the document's first chunk (gpt2: <|endoftext|> before it; wordpiece: [CLS])
  bool last;   // its last (wordpiece: [SEP] after it)
  std::vector<uint32_t> tokens;
};

std::string read_input(const std::string& path) {
  DDPX_CHECK(fs::is_regular_file(path), ErrorKind::kData,
             "{}: no such text file; pass the text files to tokenize", path);
  return read_file(path);
}

// Char chunks may end anywhere between characters: after the first byte at or past each
// multiple of chunk_bytes that starts a character (or is past a stray byte, reported anyway).
std::vector<size_t> char_split_points(std::string_view text, size_t chunk_bytes) {
  std::vector<size_t> points;
  for (size_t at = chunk_bytes; at < text.size(); at += chunk_bytes) {
    while (at < text.size() && (static_cast<uint8_t>(text[at]) & 0xC0) == 0x80) ++at;
    if (at < text.size() && (points.empty() || points.back() < at)) points.push_back(at);
  }
  return points;
}

void run_parallel(std::vector<Chunk>& chunks, int threads,
                  const std::function<void(Chunk&)>& work) {
  std::atomic<size_t> next{0};
  std::vector<std::exception_ptr> errors(chunks.size());
  auto worker = [&] {
    for (size_t i = next++; i < chunks.size(); i = next++) {
      try {
        work(chunks[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  // The first error in text order, whichever thread met it first.
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace

TokenizeResult tokenize_files(const TokenizeOptions& options) {
  DDPX_CHECK(!options.inputs.empty(), ErrorKind::kUsage,
             "data tokenize: no input files; pass one or more text files");
  DDPX_CHECK(options.val_fraction >= 0 && options.val_fraction < 1, ErrorKind::kUsage,
             "data tokenize: --val_fraction {} is outside [0, 1)", options.val_fraction);
  DDPX_CHECK(!options.out_dir.empty(), ErrorKind::kUsage, "data tokenize: --out DIR is required");
  DDPX_CHECK(options.chunk_bytes > 0, ErrorKind::kUsage, "data tokenize: chunk size must be > 0");
  const bool gpt2 = options.tokenizer == TokenizerKind::kGpt2;
  const bool wordpiece = options.tokenizer == TokenizerKind::kWordpiece;
  DDPX_CHECK(gpt2 || !options.allow_invalid_utf8, ErrorKind::kUsage,
             "data tokenize: --allow_invalid_utf8 is for --tokenizer gpt2 (whose tokens are "
             "bytes); the {} tokenizer needs UTF-8 text",
             name(options.tokenizer));
  DDPX_CHECK(wordpiece || !options.cased, ErrorKind::kUsage,
             "data tokenize: --cased is for --tokenizer wordpiece (BERT's vocab.txt)");
  DDPX_CHECK(!wordpiece || !options.vocab.empty(), ErrorKind::kUsage,
             "data tokenize: --tokenizer wordpiece needs --vocab FILE, a BERT vocab.txt (e.g. "
             "from the model's Hugging Face folder)");

  TokenizeResult result;
  result.threads =
      options.threads > 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  // Everything that can be refused is checked before a file is written.
  std::optional<BpeTokenizer> bpe;
  std::optional<CharTokenizer> chars;
  std::optional<WordPieceTokenizer> pieces;
  std::optional<uint32_t> cls, sep;
  std::string vocab_path = options.vocab;
  if (wordpiece) {
    pieces.emplace(WordPieceTokenizer::from_file(vocab_path, !options.cased));
    cls = pieces->id("[CLS]");
    sep = pieces->id("[SEP]");
    DDPX_CHECK(cls && sep, ErrorKind::kData,
               "{}: no {} token; BERT's documents are [CLS] text [SEP], so give a BERT vocab.txt "
               "that has both",
               vocab_path, cls ? "[SEP]" : "[CLS]");
  } else if (gpt2) {
    if (vocab_path.empty()) vocab_path = kDefaultGpt2Vocab;
    bpe.emplace(BpeTokenizer::from_file(vocab_path));
  } else if (!vocab_path.empty()) {
    chars.emplace(CharTokenizer::load(vocab_path));
  }
  std::vector<std::string> texts;
  for (const auto& path : options.inputs) {
    texts.push_back(read_input(path));
    result.input_bytes += static_cast<int64_t>(texts.back().size());
  }
  if ((gpt2 && !options.allow_invalid_utf8) || wordpiece) {
    for (size_t d = 0; d < texts.size(); ++d) {
      size_t bad = first_invalid_utf8(texts[d]);
      DDPX_CHECK(
          bad == std::string_view::npos, ErrorKind::kData,
          "{}: byte {} is not valid UTF-8; convert the file to UTF-8 (e.g. iconv -f "
          "latin1 -t utf-8){}",
          options.inputs[d], bad,
          gpt2 ? ", or pass --allow_invalid_utf8 to tokenize such bytes as byte tokens" : "");
    }
  }
  auto start = std::chrono::steady_clock::now();
  if (!gpt2 && !chars) {
    std::vector<std::string_view> views(texts.begin(), texts.end());
    chars.emplace(CharTokenizer::from_texts(views, options.inputs));
  }
  result.vocab_size = gpt2        ? bpe->vocab_size()
                      : wordpiece ? pieces->vocab_size()
                                  : chars->vocab_size();

  std::vector<Chunk> chunks;
  for (size_t d = 0; d < texts.size(); ++d) {
    std::string_view text = texts[d];
    auto points = gpt2        ? Gpt2Pattern::split_points(text, options.chunk_bytes)
                  : wordpiece ? WordPieceTokenizer::split_points(text, options.chunk_bytes)
                              : char_split_points(text, options.chunk_bytes);
    size_t begin = 0;
    points.push_back(text.size());
    for (size_t p : points) {
      chunks.push_back({d, begin, p, begin == 0, p == text.size(), {}});
      begin = p;
    }
  }
  run_parallel(chunks, result.threads, [&](Chunk& c) {
    const std::string& text = texts[c.document];
    if (gpt2 && c.first) c.tokens.push_back(bpe->end_of_text());
    if (wordpiece && c.first) c.tokens.push_back(*cls);
    if (gpt2)
      bpe->encode(text, c.begin, c.end, c.tokens);
    else if (wordpiece)
      pieces->encode(text, c.begin, c.end, c.tokens);
    else
      chars->encode(text, c.begin, c.end, options.inputs[c.document], c.tokens);
    if (wordpiece && c.last) c.tokens.push_back(*sep);
  });
  size_t total = 0;
  for (const auto& c : chunks) total += c.tokens.size();
  // nanoGPT's split: train = data[:int(n * (1 - val_fraction))].
  auto train_count = static_cast<size_t>(static_cast<double>(total) * (1.0 - options.val_fraction));
  std::vector<uint32_t> train, val;
  train.reserve(train_count);
  val.reserve(total - train_count);
  for (auto& c : chunks) {
    for (uint32_t t : c.tokens) (train.size() < train_count ? train : val).push_back(t);
    std::vector<uint32_t>().swap(c.tokens);
  }
  result.tokenize_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.train_tokens = static_cast<int64_t>(train.size());
  result.val_tokens = static_cast<int64_t>(val.size());

  fs::create_directories(options.out_dir);
  fs::path out(options.out_dir);
  auto write = [&](const fs::path& path, const std::vector<uint32_t>& tokens) {
    io::write_token_file(path.string(), tokens);
    result.written.push_back(path.string());
  };
  write(out / "train.bin", train);
  write(out / "val.bin", val);
  std::string vocab_file = (out / "vocab.json").string();
  if (gpt2) {
    nlohmann::json json = {{"tokenizer", "gpt2"},
                           {"vocab_size", bpe->vocab_size()},
                           {"end_of_text", bpe->end_of_text()},
                           {"rank_file", fs::absolute(vocab_path).lexically_normal().string()}};
    write_file_atomic(vocab_file, json.dump(1) + "\n");
  } else if (wordpiece) {
    nlohmann::json special = nlohmann::json::object();
    for (const char* s : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"})
      if (auto id = pieces->id(s)) special[s] = *id;
    nlohmann::json json = {{"tokenizer", "wordpiece"},
                           {"vocab_size", pieces->vocab_size()},
                           {"lowercase", pieces->lowercase()},
                           {"special_tokens", special},
                           {"vocab_file", fs::absolute(vocab_path).lexically_normal().string()}};
    write_file_atomic(vocab_file, json.dump(1) + "\n");
  } else {
    chars->save(vocab_file);
  }
  result.written.push_back(vocab_file);
  return result;
}

}  // namespace ddpx::text
