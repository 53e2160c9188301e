# Use ccache when present: rebuilds of unchanged torch-heavy translation units are then free.
# The sloppiness settings keep cache hits while a precompiled header is in use.
find_program(DDPX_CCACHE ccache)
if(DDPX_CCACHE)
  set(_ddpx_launcher ${CMAKE_COMMAND} -E env
      "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
      # Paths relative to the checkout, so a fresh clone elsewhere still hits the cache.
      "CCACHE_BASEDIR=${CMAKE_SOURCE_DIR}"
      ${DDPX_CCACHE})
  set(CMAKE_C_COMPILER_LAUNCHER ${_ddpx_launcher})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${_ddpx_launcher})
endif()
