# The memlayer device inside PoCL's tree: build-pocl.sh copies this file to
# lib/CL/devices/memlayer/CMakeLists.txt, the driver sources beside it, and
# the memlayer components it compiles in (bufalloc, devmem) to memlayer-src/.
# It is not part of memlayer's own CMake project.
file(GLOB MEMLAYER_DRIVER_SOURCES CONFIGURE_DEPENDS
  "${CMAKE_CURRENT_SOURCE_DIR}/*.cpp"
  "${CMAKE_CURRENT_SOURCE_DIR}/memlayer-src/bufalloc/*.cpp"
  "${CMAKE_CURRENT_SOURCE_DIR}/memlayer-src/devmem/*.cpp")

find_package(PkgConfig REQUIRED)
pkg_check_modules(MEMLAYER_HWLOC REQUIRED IMPORTED_TARGET hwloc)

add_pocl_device_library(pocl-devices-memlayer ${MEMLAYER_DRIVER_SOURCES})
set_target_properties(pocl-devices-memlayer PROPERTIES CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON)
target_include_directories(pocl-devices-memlayer PRIVATE
  "${CMAKE_CURRENT_SOURCE_DIR}"
  "${CMAKE_CURRENT_SOURCE_DIR}/memlayer-src/include")
target_compile_options(pocl-devices-memlayer PRIVATE -Wall -Wextra)
if(ENABLE_LOADABLE_DRIVERS)
  # The driver takes PoCL's CPU compile path and event plumbing from the
  # basic and pthread drivers' ops tables.
  target_link_libraries(pocl-devices-memlayer PRIVATE pocl-devices-basic pocl-devices-pthread
                        PkgConfig::MEMLAYER_HWLOC Threads::Threads)
else()
  target_link_libraries(pocl-devices-memlayer PRIVATE PkgConfig::MEMLAYER_HWLOC)
endif()
# PoCL's own version (its top CMakeLists.txt): src/pocl_compat.hpp picks the
# driver API of PoCL 3.1 or 7.1 by it.
target_compile_definitions(pocl-devices-memlayer PRIVATE MEMLAYER_POCL_MAJOR=${MAJOR_VERSION})
