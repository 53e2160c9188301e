# libtorch comes from PyTorch's wheel (cmake/torch.cmake); everything else from Debian's archive
# (scripts/bootstrap installs them).
include(${CMAKE_CURRENT_LIST_DIR}/torch.cmake)
find_package(Threads REQUIRED)
find_package(ZLIB REQUIRED)
find_package(CURL REQUIRED)
find_package(LibArchive REQUIRED)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
find_package(nlohmann_json REQUIRED)
find_package(CLI11 CONFIG REQUIRED)

find_package(SQLite3 REQUIRED)
find_package(PkgConfig REQUIRED)
# Debian's cpp-httplib is a compiled library; its .pc file carries the feature macros
# (OpenSSL, zlib, brotli) the header must see.
pkg_check_modules(HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
