# libtorch from PyTorch's pip wheel. DDPX_PYTHON names the interpreter whose `torch` package
# provides it (scripts/python-env picks one: an installed torch of a supported version, else the
# checkout's .venv with the pinned wheel from scripts/requirements.txt). Its include/, lib/ and
# share/cmake/Torch are found through torch.utils.cmake_prefix_path.
set(DDPX_TORCH_MIN_VERSION 2.6 CACHE INTERNAL "oldest torch ddpx configures against")

if(NOT DDPX_PYTHON)
  if(EXISTS ${PROJECT_SOURCE_DIR}/.venv/bin/python)
    set(_ddpx_python ${PROJECT_SOURCE_DIR}/.venv/bin/python)
  else()
    find_program(_ddpx_python NAMES python3 python)
  endif()
  set(DDPX_PYTHON ${_ddpx_python} CACHE FILEPATH "ddpx: the Python whose torch package is built against")
endif()

execute_process(
  COMMAND ${DDPX_PYTHON} -c
    "import torch, torch.utils, torch.distributed as d; print(torch.__version__.split('+')[0]); print(torch.utils.cmake_prefix_path); print(int(d.is_available())); print(torch.version.cuda or ''); print(torch.version.hip or '')"
  OUTPUT_VARIABLE _ddpx_torch_info ERROR_VARIABLE _ddpx_torch_error
  RESULT_VARIABLE _ddpx_torch_rc OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _ddpx_torch_rc EQUAL 0 OR NOT _ddpx_torch_info)
  string(REGEX REPLACE ".*\n([^\n]+)\n*$" "\\1" _ddpx_last_line "${_ddpx_torch_error}")
  message(FATAL_ERROR "ddpx: DDPX_PYTHON=${DDPX_PYTHON} cannot import torch (${_ddpx_last_line}); "
          "run scripts/python-env to make .venv with the pinned torch, or point DDPX_PYTHON at "
          "a Python with torch >= ${DDPX_TORCH_MIN_VERSION}")
endif()
string(REPLACE "\n" ";" _ddpx_torch_info "${_ddpx_torch_info}")
list(GET _ddpx_torch_info 0 DDPX_TORCH_VERSION)
list(GET _ddpx_torch_info 1 _ddpx_torch_prefix)
list(GET _ddpx_torch_info 2 _ddpx_torch_distributed)
list(LENGTH _ddpx_torch_info _ddpx_n)
set(DDPX_TORCH_CUDA "")
set(DDPX_TORCH_HIP "")
if(_ddpx_n GREATER 3)
  list(GET _ddpx_torch_info 3 DDPX_TORCH_CUDA)
endif()
if(_ddpx_n GREATER 4)
  list(GET _ddpx_torch_info 4 DDPX_TORCH_HIP)
endif()
if(DDPX_TORCH_VERSION VERSION_LESS DDPX_TORCH_MIN_VERSION)
  message(FATAL_ERROR "ddpx: torch ${DDPX_TORCH_VERSION} (from ${DDPX_PYTHON}) is older than "
          "${DDPX_TORCH_MIN_VERSION}, the oldest ddpx builds against; upgrade it or unset "
          "DDPX_PYTHON so that scripts/python-env installs the pinned one")
endif()
if(NOT _ddpx_torch_distributed)
  message(FATAL_ERROR "ddpx: torch ${DDPX_TORCH_VERSION} (from ${DDPX_PYTHON}) was built without "
          "torch.distributed (c10d); install a build with it, such as PyPI's wheel")
endif()

list(APPEND CMAKE_PREFIX_PATH ${_ddpx_torch_prefix})
find_package(Torch REQUIRED)
get_filename_component(DDPX_TORCH_ROOT "${_ddpx_torch_prefix}/../.." ABSOLUTE)

# What ddpx's own code links: libtorch's CPU part alone (torch_cpu and c10, with torch's include
# directories and flags). The CUDA (HIP) part is the GPU library's (src/distributed/gpu/, built
# as libddpx-gpu.so against the whole `torch`), loaded at run time where a GPU driver is: a
# process on CPUs never maps libtorch_cuda and the CUDA libraries (distributed/gpu_library.h).
# Installed, ddpx's libraries name `torch` instead, as a user's program links it whole.
add_library(ddpx_torch_cpu INTERFACE)
target_link_libraries(ddpx_torch_cpu INTERFACE torch_cpu_library)
target_include_directories(ddpx_torch_cpu SYSTEM INTERFACE
                           $<TARGET_PROPERTY:torch,INTERFACE_INCLUDE_DIRECTORIES>)
target_compile_options(ddpx_torch_cpu INTERFACE $<TARGET_PROPERTY:torch,INTERFACE_COMPILE_OPTIONS>)
set(DDPX_TORCH $<BUILD_INTERFACE:ddpx_torch_cpu> $<INSTALL_INTERFACE:torch>)

# CUDA (or ROCm, whose HIP build keeps the CUDA names) compiled in wherever the libtorch has it.
if(TARGET torch_cuda OR DDPX_TORCH_CUDA OR DDPX_TORCH_HIP)
  set(_ddpx_torch_has_gpu ON)
else()
  set(_ddpx_torch_has_gpu OFF)
endif()
option(DDPX_WITH_CUDA "ddpx: compile the CUDA/ROCm and NCCL/RCCL paths (default: where libtorch has them)"
       ${_ddpx_torch_has_gpu})
if(DDPX_WITH_CUDA AND NOT _ddpx_torch_has_gpu)
  message(FATAL_ERROR "ddpx: DDPX_WITH_CUDA=ON but torch ${DDPX_TORCH_VERSION} from ${DDPX_PYTHON} "
          "is a CPU-only build; use PyPI's CUDA wheel (scripts/requirements.txt) or configure "
          "with -DDDPX_WITH_CUDA=OFF")
endif()

# PyTorch's wheel exports some C++ standard library functions of its own (std::filesystem,
# std::chrono's time zones, built with a newer GCC than the system's): an executable that lists
# libtorch before libstdc++ binds those calls to libtorch's copies, which crash
# (std::filesystem::remove_all jumped to address 0). Naming libstdc++ first keeps them the
# system's.
add_link_options(-Wl,--push-state,--no-as-needed -lstdc++ -Wl,--pop-state)

# fmt: the copy inside libtorch's headers. c10d's headers include it, so a second fmt (Debian's
# libfmt-dev) would meet it in one translation unit. The build compiles its engine once
# (src/core/fmt_library.cpp, in ddpx_core) instead of in every translation unit; installed
# (cmake/install.cmake), it is header-only for the user's code, reaches those headers through the
# torch target and carries the libstdc++-first link option above to the user's executables.
add_library(ddpx_fmt INTERFACE)
target_include_directories(ddpx_fmt SYSTEM INTERFACE $<BUILD_INTERFACE:${DDPX_TORCH_ROOT}/include>)
target_compile_definitions(ddpx_fmt INTERFACE $<INSTALL_INTERFACE:FMT_HEADER_ONLY=1>)
target_link_libraries(ddpx_fmt INTERFACE $<INSTALL_INTERFACE:torch>)
target_link_options(ddpx_fmt INTERFACE
                    "$<INSTALL_INTERFACE:SHELL:-Wl,--push-state,--no-as-needed -lstdc++ -Wl,--pop-state>")

message(STATUS "ddpx: torch ${DDPX_TORCH_VERSION} from ${DDPX_PYTHON} "
        "(CUDA ${DDPX_TORCH_CUDA}${DDPX_TORCH_HIP}; compiled in: ${DDPX_WITH_CUDA})")
