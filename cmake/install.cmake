# `cmake --install build --prefix P`: the two executables (bin/ddpx, bin/ddpx-torch), the headers
# (include/ddpx/<folder>/...), the libraries and a CMake package, so that a C++ project can
#   find_package(ddpx REQUIRED)                 # CMAKE_PREFIX_PATH=P
#   target_link_libraries(my_trainer PRIVATE ddpx::ddpx)
# The package finds the libtorch ddpx was built against (its Torch_DIR is recorded), so a user's
# program and ddpx share one libtorch. The job service, doctor and CLI libraries stay private:
# they are reached through the `ddpx` command.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(DDPX_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/ddpx)
set(_ddpx_exported ddpx_core ddpx_trace ddpx_io ddpx_data ddpx_models ddpx_optim
    ddpx_distributed ddpx_parallel ddpx_train ddpx_launch ddpx_bench ddpx_fmt ddpx_all)
set_target_properties(ddpx_all PROPERTIES EXPORT_NAME ddpx)

install(TARGETS ddpx ddpx_torch RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET ddpx_gpu)  # the GPU library, which ddpx-torch finds in ../lib (gpu_library.h)
  install(TARGETS ddpx_gpu LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
install(TARGETS ${_ddpx_exported} EXPORT ddpxTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ddpx)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/src/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ddpx
        FILES_MATCHING PATTERN "*.h"
        PATTERN "absent" EXCLUDE PATTERN "cli" EXCLUDE PATTERN "serve" EXCLUDE
        PATTERN "doctor" EXCLUDE)
install(EXPORT ddpxTargets NAMESPACE ddpx:: DESTINATION ${DDPX_INSTALL_CMAKEDIR})

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/ddpxConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/ddpxConfig.cmake
                              INSTALL_DESTINATION ${DDPX_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/ddpxConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/ddpxConfig.cmake ${PROJECT_BINARY_DIR}/ddpxConfigVersion.cmake
        DESTINATION ${DDPX_INSTALL_CMAKEDIR})
