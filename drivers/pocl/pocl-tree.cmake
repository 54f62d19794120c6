# The memlayer device inside PoCL's tree: build-pocl.sh copies this file to
# lib/CL/devices/memlayer/CMakeLists.txt and the driver sources beside it.
# memlayer's libraries (bufalloc, devmem) come from the memlayer build that
# build-pocl.sh installs beside PoCL's build folder, found with
# find_package(memlayer). It is not part of memlayer's own CMake project.
file(GLOB MEMLAYER_DRIVER_SOURCES CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/*.cpp")

find_package(memlayer 0.1 CONFIG REQUIRED PATHS "${CMAKE_BINARY_DIR}/../memlayer" NO_DEFAULT_PATH)

add_pocl_device_library(pocl-devices-memlayer ${MEMLAYER_DRIVER_SOURCES})
set_target_properties(pocl-devices-memlayer PROPERTIES CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON)
target_include_directories(pocl-devices-memlayer PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}")
target_compile_options(pocl-devices-memlayer PRIVATE -Wall -Wextra)
# Never unloaded: PoCL 3.1's pocl_uninit_devices (clUnloadPlatformCompiler
# with no context left) dlcloses a driver's library after each of its
# devices, then calls the next device's uninit through it. The library
# stayed loaded only while it was the first to define a C++ unique symbol
# (the one std::make_shared uses; glibc then never unloads it): once
# libpocl's memlayer core made a shared_ptr too, PoCL's
# runtime/test_buffer_migration crashed there on two memlayer devices.
target_link_options(pocl-devices-memlayer PRIVATE "LINKER:-z,nodelete")
if(ENABLE_LOADABLE_DRIVERS)
  # The driver takes PoCL's CPU compile path and event plumbing from the
  # basic and pthread drivers' ops tables.
  target_link_libraries(pocl-devices-memlayer PRIVATE memlayer::driver_devmem memlayer::bufalloc
                        pocl-devices-basic pocl-devices-pthread Threads::Threads)
else()
  target_link_libraries(pocl-devices-memlayer PRIVATE memlayer::driver_devmem memlayer::bufalloc)
endif()
# PoCL's own version (its top CMakeLists.txt): src/pocl_compat.hpp picks the
# driver API of PoCL 3.1 or 7.1 by it.
target_compile_definitions(pocl-devices-memlayer PRIVATE MEMLAYER_POCL_MAJOR=${MAJOR_VERSION})
