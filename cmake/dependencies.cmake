# libtorch comes from PyTorch's wheel (cmake/torch.cmake); everything else from Debian's archive
# (scripts/bootstrap installs them).
#
# DDPX_GPU_CHECK=ON builds what the GPU checks run (ddpx, ddpx-torch and the `gpu` tests) with
# nothing but libtorch, CUDA and the header-only or static libraries of a kit: for a GPU machine
# with PyTorch and no package registry (bench/gpu_check.sh; the kit is made by scripts/gpu-kit).
# The job service, `ddpx data download` and CIFAR's archive unpacking are left out (src/absent/
# says so when they are asked for); each library is still taken from the system where present.
option(DDPX_GPU_CHECK "ddpx: build only what the GPU checks run, needing libtorch, CUDA and a kit" OFF)
set(DDPX_KIT "${PROJECT_SOURCE_DIR}/gpu-kit" CACHE PATH
    "ddpx: the folder scripts/gpu-kit made (used with DDPX_GPU_CHECK where the system lacks a library)")

include(${CMAKE_CURRENT_LIST_DIR}/torch.cmake)
find_package(Threads REQUIRED)

if(NOT DDPX_GPU_CHECK)
  find_package(ZLIB REQUIRED)
  find_package(CURL REQUIRED)
  find_package(LibArchive REQUIRED)
  find_package(OpenSSL REQUIRED COMPONENTS Crypto)
  find_package(nlohmann_json REQUIRED)
  find_package(CLI11 CONFIG REQUIRED)
  # Image decoders (src/io/jpeg, src/io/png): Debian's libjpeg-turbo and libpng.
  find_package(JPEG REQUIRED)
  find_package(PNG REQUIRED)
  # WebP (src/io/webp): optional; without Debian's libwebp-dev a WebP file is refused with a
  # line saying to install it (src/absent/webp.cpp).
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(WEBP QUIET IMPORTED_TARGET libwebp)
  if(TARGET PkgConfig::WEBP)
    set(DDPX_WITH_WEBP ON)
    message(STATUS "ddpx: WebP images: libwebp ${WEBP_VERSION}")
  else()
    set(DDPX_WITH_WEBP OFF)
    message(STATUS "ddpx: WebP images: no libwebp (install libwebp-dev); WebP files are refused")
  endif()

  find_package(SQLite3 REQUIRED)
  find_package(PkgConfig REQUIRED)
  # Debian's cpp-httplib is a compiled library; its .pc file carries the feature macros
  # (OpenSSL, zlib, brotli) the header must see.
  pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
  # PCRE2 (8-bit, with its JIT): GPT-2's pre-tokenisation regex (src/text/gpt2_pattern.cpp).
  pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
  return()
endif()

# The kit's copy of a header-only library, as the target its package would define.
function(ddpx_kit_headers target header)
  if(NOT EXISTS ${DDPX_KIT}/include/${header})
    message(FATAL_ERROR "ddpx: DDPX_GPU_CHECK: ${header} is neither installed nor in the kit "
            "DDPX_KIT=${DDPX_KIT}; make the kit with scripts/gpu-kit on a machine with the Debian "
            "packages (scripts/bootstrap --tests) and bring it along, or install the package")
  endif()
  add_library(${target} INTERFACE IMPORTED GLOBAL)
  set_target_properties(${target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${DDPX_KIT}/include)
  message(STATUS "ddpx: ${header} from the kit ${DDPX_KIT}")
endfunction()

find_package(ZLIB QUIET)
if(NOT ZLIB_FOUND)
  set(ZLIB_ROOT ${DDPX_KIT})
  ddpx_kit_headers(ddpx_kit_zlib zlib.h)  # only its check: FindZLIB makes the target
  find_package(ZLIB REQUIRED)
elseif(ZLIB_INCLUDE_DIRS MATCHES "^${DDPX_KIT}/")  # the kit's, cached by an earlier configure
  message(STATUS "ddpx: zlib.h from the kit ${DDPX_KIT}")
endif()
find_package(nlohmann_json QUIET)
if(NOT nlohmann_json_FOUND)
  ddpx_kit_headers(nlohmann_json::nlohmann_json nlohmann/json.hpp)
endif()
find_package(CLI11 CONFIG QUIET)
if(NOT CLI11_FOUND)
  ddpx_kit_headers(CLI11::CLI11 CLI/CLI.hpp)
endif()
# Gloo's headers (libtorch's ProcessGroupGloo.hpp includes them; the wheel lacks them).
find_path(DDPX_GLOO_INCLUDE gloo/algorithm.h)
if(NOT DDPX_GLOO_INCLUDE)
  ddpx_kit_headers(ddpx_kit_gloo gloo/algorithm.h)
  set_property(TARGET torch APPEND PROPERTY INTERFACE_INCLUDE_DIRECTORIES ${DDPX_KIT}/include)
endif()
# PCRE2 where installed; else the gpt2 tokenizer is left out (src/absent/gpt2_pattern.cpp).
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PCRE2 QUIET IMPORTED_TARGET libpcre2-8)
endif()
# The image decoders where the GPU machine has them; otherwise src/absent/images.cpp says so.
find_package(JPEG QUIET)
find_package(PNG QUIET)
set(DDPX_WITH_WEBP OFF)  # WebP files are refused (src/absent/webp.cpp)
if(NOT JPEG_FOUND OR NOT PNG_FOUND)
  message(STATUS "ddpx: DDPX_GPU_CHECK: no libjpeg or libpng; image folders are left out")
endif()
message(STATUS "ddpx: DDPX_GPU_CHECK: building ddpx, ddpx-torch and the gpu tests only; the job "
        "service and dataset downloads are left out")
