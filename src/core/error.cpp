#include "core/error.h"

namespace ddpx {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::kUsage:
      return "usage";
    case ErrorKind::kData:
      return "data";
    case ErrorKind::kIo:
      return "io";
    case ErrorKind::kDist:
      return "distributed";
    case ErrorKind::kTimeout:
      return "timeout";
    case ErrorKind::kInternal:
      return "internal";
  }
  return "error";
}

}  // namespace ddpx
