# DDPX_BUILD_FUZZERS: libFuzzer's coverage instrumentation (-fsanitize=fuzzer-no-link) on every
# target of the build, before src/ makes them. Applied globally, like DDPX_SANITIZE, so that the
# one precompiled torch header (ddpx_pch) matches every user of it: clang refuses a PCH built
# with another sanitizer set, and fuzzer-no-link is one. The fuzz targets (fuzz/) link
# libFuzzer's main() on top. A fuzz build builds only what its targets link (fuzz/check.sh names
# them), so instrumenting the rest costs nothing.
if(DDPX_BUILD_FUZZERS)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "ddpx: DDPX_BUILD_FUZZERS needs clang (libFuzzer); set CXX=clang++")
  endif()
  if(NOT DDPX_SANITIZE)
    message(FATAL_ERROR "ddpx: DDPX_BUILD_FUZZERS needs -DDDPX_SANITIZE=ON (ASan+UBSan)")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
