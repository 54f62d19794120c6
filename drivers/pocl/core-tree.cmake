# memlayer's migration engine inside PoCL's core library: build-pocl.sh
# copies this file to lib/CL/memlayer-core/CMakeLists.txt and the bridge
# (drivers/pocl/core) beside it. Our patch adds the bridge's objects to
# libpocl; the engine and migration libraries come from the memlayer build
# that build-pocl.sh installs beside PoCL's build folder, found with
# find_package(memlayer), and join libpocl's link. It is not part of
# memlayer's own CMake project.
file(GLOB MEMLAYER_CORE_SOURCES CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/*.cpp")

find_package(memlayer 0.1 CONFIG REQUIRED PATHS "${CMAKE_BINARY_DIR}/../memlayer" NO_DEFAULT_PATH)

add_library(pocl-memlayer-core OBJECT ${MEMLAYER_CORE_SOURCES})
set_target_properties(pocl-memlayer-core PROPERTIES CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON
                      POSITION_INDEPENDENT_CODE ON)
target_include_directories(pocl-memlayer-core PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}")
# The engine's headers and usage requirements for the bridge's objects.
target_link_libraries(pocl-memlayer-core PRIVATE memlayer::engine)
if(MEMLAYER_MIGRATION_DEFAULT)
  target_compile_definitions(pocl-memlayer-core PRIVATE MEMLAYER_MIGRATION_DEFAULT=1)
else()
  target_compile_definitions(pocl-memlayer-core PRIVATE MEMLAYER_MIGRATION_DEFAULT=0)
endif()
target_compile_options(pocl-memlayer-core PRIVATE -Wall -Wextra)
# pocl_core_compat.hpp: where PoCL 3.1 and 7.1 differ
target_compile_definitions(pocl-memlayer-core PRIVATE MEMLAYER_POCL_MAJOR=${MAJOR_VERSION})
if(OCL_ICD_INCLUDE_DIRS)
  target_include_directories(pocl-memlayer-core SYSTEM PRIVATE ${OCL_ICD_INCLUDE_DIRS})
endif()

# libpocl links the archives themselves, in dependency order, through the
# list lib/CL/CMakeLists.txt adds to its private link libraries: files, not
# targets (the imported targets are this folder's alone), so none of their
# usage requirements (C++20) reaches PoCL's own sources.
set(archives)
foreach(lib engine migration bufalloc)
  get_target_property(archive memlayer::${lib} LOCATION)
  list(APPEND archives "${archive}")
endforeach()
set(POCL_DEVICES_LINK_LIST ${POCL_DEVICES_LINK_LIST} ${archives} PARENT_SCOPE)
