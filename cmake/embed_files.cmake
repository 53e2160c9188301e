# Embeds files into a C++ source as byte arrays, so that the binary serves them without the
# source tree (the dashboard of `ddpx serve`: src/serve/dashboard/). Run in script mode at build
# time:
#   cmake -DINPUT_DIR=DIR -DOUTPUT=FILE.cpp -P embed_files.cmake
# Every regular file directly in DIR becomes an entry of ddpx::serve::kDashboardFiles (declared
# in serve/dashboard_files.h), named by its file name and ended by an entry with a null name.
cmake_minimum_required(VERSION 3.18)

file(GLOB _files LIST_DIRECTORIES false RELATIVE ${INPUT_DIR} ${INPUT_DIR}/*)
list(SORT _files)
set(_arrays "")
set(_table "")
set(_i 0)
foreach(_name ${_files})
  file(READ ${INPUT_DIR}/${_name} _hex HEX)
  string(LENGTH "${_hex}" _hex_length)
  math(EXPR _size "${_hex_length} / 2")
  # 32 bytes a line: "0x3c,0x21,..."
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," _bytes "${_hex}")
  string(REGEX REPLACE "((0x..,){32})" "\\1\n    " _bytes "${_bytes}")
  string(APPEND _arrays "const unsigned char k${_i}[] = {\n    ${_bytes}0x00};\n")
  string(APPEND _table "    {\"${_name}\", k${_i}, ${_size}},\n")
  math(EXPR _i "${_i} + 1")
endforeach()

set(_text "// Generated at build time by cmake/embed_files.cmake from ${INPUT_DIR}: do not edit.
#include \"serve/dashboard_files.h\"

namespace ddpx::serve {
namespace {

${_arrays}
}  // namespace

const EmbeddedFile kDashboardFiles[] = {
${_table}    {nullptr, nullptr, 0},
};

}  // namespace ddpx::serve
")
file(WRITE ${OUTPUT} "${_text}")
