// GPT-2's pre-tokenisation in a -DDDPX_GPU_CHECK=ON build without PCRE2 (see absent.h): the gpt2
// tokenizer is not in this build; the char tokenizer and token files are.
#include "text/gpt2_pattern.h"

#include "absent/absent.h"

namespace ddpx::text {
namespace {

constexpr const char* kWhat = "the gpt2 tokenizer (PCRE2)";
constexpr const char* kInstead =
    "tokenize with a full build (scripts/build) and copy train.bin and val.bin here";

}  // namespace

struct Gpt2Pattern::Compiled {};

Gpt2Pattern::Gpt2Pattern() { absent::not_built(kWhat, kInstead); }
Gpt2Pattern::~Gpt2Pattern() = default;
void Gpt2Pattern::for_each_piece(std::string_view, size_t, size_t,
                                 const std::function<void(size_t, size_t)>&) const {
  absent::not_built(kWhat, kInstead);
}
std::vector<size_t> Gpt2Pattern::split_points(std::string_view, size_t) { return {}; }

}  // namespace ddpx::text
