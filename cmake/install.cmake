# The C++ API for other CMake projects, `cmake --install <build> --component
# dev` (the headers, the four static libraries, a package config) and `--component cli`
# (the opt4store CLI): then
#   find_package(opt4store REQUIRED)
#   target_link_libraries(app PRIVATE opt4store::store)
# tests/cpp_consumer is such a project, built against an install by the
# test command. The libraries are static and position-independent; their
# system libraries (RocksDB, liburing, LZ4) are found again by the package
# config, as this build found them. pip installs the python component only.
include(CMakePackageConfigHelpers)

set(OPT4STORE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/opt4store)
foreach(layer base plan tiers store)
  set_target_properties(opt4store_${layer} PROPERTIES EXPORT_NAME ${layer})
endforeach()
install(TARGETS opt4store_base opt4store_plan opt4store_tiers opt4store_store
        EXPORT opt4storeTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/engine/include/opt4store
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev)
install(EXPORT opt4storeTargets NAMESPACE opt4store:: DESTINATION ${OPT4STORE_CMAKE_DIR}
        COMPONENT dev)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/opt4storeConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/opt4storeConfig.cmake
                              INSTALL_DESTINATION ${OPT4STORE_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/opt4storeConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/opt4storeConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/opt4storeConfigVersion.cmake
        DESTINATION ${OPT4STORE_CMAKE_DIR} COMPONENT dev)
install(TARGETS opt4store RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT cli)
