# memlayer's migration engine inside PoCL's core library: build-pocl.sh
# copies this file to lib/CL/memlayer-core/CMakeLists.txt, the bridge
# (drivers/pocl/core) beside it and the migration component's sources to
# memlayer-src/. Our patch adds the objects to libpocl. It is not part of
# memlayer's own CMake project.
# The planner's C API (migration/src/c_api.cpp) is left out: the bridge
# calls the engine in C++ and uses only migration.h's types.
file(GLOB MEMLAYER_CORE_SOURCES CONFIGURE_DEPENDS
  "${CMAKE_CURRENT_SOURCE_DIR}/*.cpp"
  "${CMAKE_CURRENT_SOURCE_DIR}/memlayer-src/migration/*.cpp"
  "${CMAKE_CURRENT_SOURCE_DIR}/memlayer-src/engine/*.cpp")
list(FILTER MEMLAYER_CORE_SOURCES EXCLUDE REGEX "memlayer-src/migration/c_api\\.cpp$")

add_library(pocl-memlayer-core OBJECT ${MEMLAYER_CORE_SOURCES})
set_target_properties(pocl-memlayer-core PROPERTIES CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON
                      POSITION_INDEPENDENT_CODE ON)
target_include_directories(pocl-memlayer-core PRIVATE
  "${CMAKE_CURRENT_SOURCE_DIR}"
  "${CMAKE_CURRENT_SOURCE_DIR}/memlayer-src/include")
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
