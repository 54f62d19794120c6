# memlayer_library(<name> SOURCES ... [PUBLIC_DEPS ...]): one component's
# static library memlayer_<name>, exported as memlayer::<name>, with its
# public headers in <component>/include and installed with them.
function(memlayer_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;PUBLIC_DEPS" ${ARGN})
  set(target memlayer_${name})
  add_library(${target} STATIC ${ARG_SOURCES})
  add_library(memlayer::${name} ALIAS ${target})
  set_target_properties(${target} PROPERTIES
    EXPORT_NAME ${name}
    OUTPUT_NAME ${target}
    POSITION_INDEPENDENT_CODE ON)  # linked into shared drivers (PoCL's)
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${CMAKE_CURRENT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_link_libraries(${target} PUBLIC ${ARG_PUBLIC_DEPS})
  memlayer_strict(${target})
  install(TARGETS ${target} EXPORT memlayerTargets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(DIRECTORY include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
endfunction()
