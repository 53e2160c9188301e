#include "serve/auth.h"

#include <fmt/format.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "core/error.h"

namespace ddpx::serve {
namespace {

std::string hex(const unsigned char* bytes, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) out += fmt::format("{:02x}", bytes[i]);
  return out;
}

}  // namespace

std::string new_token() {
  unsigned char bytes[32];
  DDPX_CHECK(RAND_bytes(bytes, sizeof(bytes)) == 1, ErrorKind::kIo,
             "cannot draw random bytes for a token (OpenSSL RAND_bytes)");
  return hex(bytes, sizeof(bytes));
}

Sha256::Sha256() : ctx_(EVP_MD_CTX_new(), EVP_MD_CTX_free) {
  DDPX_CHECK(ctx_ && EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) == 1, ErrorKind::kIo,
             "cannot start a SHA-256 (OpenSSL)");
}

void Sha256::update(const void* data, size_t n) { EVP_DigestUpdate(ctx_.get(), data, n); }

std::string Sha256::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx_.get(), digest, &n);
  return serve::hex(digest, n);
}

std::string sha256_hex(const std::string& bytes) {
  Sha256 sha;
  sha.update(bytes.data(), bytes.size());
  return sha.hex();
}

std::string hash_token(const std::string& token) { return sha256_hex(token); }

}  // namespace ddpx::serve
