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

std::string sha256_hex(const std::string& bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &n, EVP_sha256(), nullptr);
  return hex(digest, n);
}

std::string hash_token(const std::string& token) { return sha256_hex(token); }

}  // namespace ddpx::serve
