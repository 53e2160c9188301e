// Tokens for the job service: 32 random bytes shown once as hex; only their SHA-256 is stored.
#pragma once

#include <memory>
#include <string>

struct evp_md_ctx_st;

namespace ddpx::serve {

// SHA-256 of data given in pieces.
class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  std::string hex();  // the digest as 64 hex characters; once

 private:
  std::unique_ptr<evp_md_ctx_st, void (*)(evp_md_ctx_st*)> ctx_;
};

std::string new_token();                       // 64 hex characters from the kernel's CSPRNG
std::string hash_token(const std::string& t);  // SHA-256, hex
std::string sha256_hex(const std::string& bytes);

}  // namespace ddpx::serve
