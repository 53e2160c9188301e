// Tokens for the job service: 32 random bytes shown once as hex; only their SHA-256 is stored.
#pragma once

#include <string>

namespace ddpx::serve {

std::string new_token();                       // 64 hex characters from the kernel's CSPRNG
std::string hash_token(const std::string& t);  // SHA-256, hex
std::string sha256_hex(const std::string& bytes);

}  // namespace ddpx::serve
