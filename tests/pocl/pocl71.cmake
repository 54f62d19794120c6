# PoCL 7.1 with the memlayer driver and memlayer's engine in its core
# (MEMLAYER_BUILD_POCL71; label pocl71): the driver's own tests, the engine
# suite (engine_suite.cmake), PoCL 7.1's own engine where it loses data,
# PoCL 7.1's runtime and regression suites on two memlayer devices, and the
# build script's errors for bad inputs. Included from
# tests/pocl/CMakeLists.txt, which defines the programs.

# memlayer_pocl71_test(name devices command...): a test with the PoCL 7.1
# build's environment and POCL_DEVICES=devices.
function(memlayer_pocl71_test name devices)
  add_test(NAME ${name} COMMAND ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS pocl71 TIMEOUT 900
    ENVIRONMENT "${MEMLAYER_POCL71_ENV};POCL_DEVICES=${devices}")
endfunction()

foreach(program pocl_driver_test pocl_failure_test pocl_alloc_failure_test pocl_image_test pocl_device_test
        pocl_migration_test pocl_remote_test pocl_svm_test pocld_peer_test pocl_oversubscribed_test)
  add_dependencies(${program} pocl71)
endforeach()

memlayer_pocl_engine_suite(pocl71 "${MEMLAYER_POCL71_ENV}" cpu pocl71_ pocl71_)
memlayer_pocl71_test(pocl71_alloc_failure memlayer $<TARGET_FILE:pocl_alloc_failure_test>)
# 7.1's command buffers replay their commands with the bytes they name.
set_property(TEST pocl71_migration APPEND PROPERTY ENVIRONMENT "MEMLAYER_EXPECT_COMMAND_BUFFER=1")

set(driver_env
  "POCL_MEMLAYER0_PARAMETERS=global_mem=48M,local_mem=32K,compute_units=2"
  "POCL_MEMLAYER1_PARAMETERS=global_mem=80M,local_mem=64K,compute_units=3"
  "MEMLAYER_EXPECT_POCL_VERSION=7.1" "MEMLAYER_EXPECT_DEVICE_NAME=memlayer-")
memlayer_pocl71_test(pocl71_driver "memlayer memlayer" $<TARGET_FILE:pocl_driver_test>)
set_property(TEST pocl71_driver APPEND PROPERTY ENVIRONMENT ${driver_env})

# PoCL 7.1's own engine (POCL_MEMLAYER_MIGRATION=0, same build) where it
# loses data and memlayer's does not: a kernel's write to a sub-buffer is not
# seen through its parent on the other device (asserted as lost:
# pocl_driver_test.cpp, AKernelsWriteToASubBufferIsReadThroughItsParent);
# the previous content under a cancelled write (asserted as lost:
# pocl_failure_test.cpp, ACancelledWriteLeavesThePreviousContent). Each turns
# red the day 7.1's engine stops losing it.
memlayer_pocl71_test(pocl71_driver_own_engine "memlayer memlayer" $<TARGET_FILE:pocl_driver_test>
  --gtest_filter=PoclDriver.AKernelsWriteToASubBufferIsReadThroughItsParent)
set_property(TEST pocl71_driver_own_engine APPEND PROPERTY ENVIRONMENT ${driver_env}
  "POCL_MEMLAYER_MIGRATION=0" "MEMLAYER_EXPECT_SUB_BUFFER_LOSS=1")
# A device without ranged migrations (migration_ranges=0: as a CUDA or
# PoCL proxy device, each of its migrations moves its whole buffer whatever
# range it names): memlayer's engine plans whole buffers in its contexts,
# losing nothing (before, such contexts kept PoCL 7.1's own engine and its
# sub-buffer loss showed). The seeded stress, every read checked, with such
# a device among three: planned ranges into or out of it would overwrite
# newer bytes.
memlayer_pocl71_test(pocl71_driver_device_without_ranges "memlayer memlayer" $<TARGET_FILE:pocl_driver_test>
  --gtest_filter=PoclDriver.AKernelsWriteToASubBufferIsReadThroughItsParent:PoclDriver.ASubBufferStepMovesWhatItsContextsDevicesCanMove)
set_property(TEST pocl71_driver_device_without_ranges APPEND PROPERTY ENVIRONMENT
  "POCL_MEMLAYER1_PARAMETERS=migration_ranges=0" "MEMLAYER_EXPECT_WHOLE_BUFFERS=1")
memlayer_pocl71_test(pocl71_cl_stress_device_without_ranges "memlayer memlayer memlayer" $<TARGET_FILE:memlayer-cl-stress>
  --ops 3000 --seed 9 --queues-per-device 2)
set_property(TEST pocl71_cl_stress_device_without_ranges APPEND PROPERTY ENVIRONMENT
  "POCL_MEMLAYER1_PARAMETERS=migration_ranges=0")
memlayer_pocl71_test(pocl71_failure_own_engine_cancelled_write "memlayer memlayer" $<TARGET_FILE:pocl_failure_test>
  --gtest_filter=PoclFailure.ACancelledWriteLeavesThePreviousContent)
set_property(TEST pocl71_failure_own_engine_cancelled_write APPEND PROPERTY ENVIRONMENT "POCL_MEMLAYER_MIGRATION=0"
  "MEMLAYER_EXPECT_CANCELLED_WRITE_LOSS=1")

# clinfo through the ICD loader lists the two devices of the memlayer driver.
find_program(MEMLAYER_CLINFO clinfo)
if(MEMLAYER_CLINFO)
  memlayer_pocl71_test(pocl71_clinfo "memlayer memlayer" ${MEMLAYER_CLINFO} --list)
  set_property(TEST pocl71_clinfo PROPERTY PASS_REGULAR_EXPRESSION "Platform #0: Portable Computing Language[^\n]*\n[^\n]*Device #0: memlayer-[^\n]*\n[^\n]*Device #1: memlayer-")
endif()

# PoCL 7.1's own tests/runtime on two memlayer devices (memlayer's engine,
# the build's default). Left out: clCreateSubDevices (the memlayer device
# does not partition, doc/pocl-driver.md) and test_device_address (buffer
# device addresses: it fails on PoCL 7.1's own cpu devices here too).
memlayer_pocl71_test(pocl71_suite_runtime "memlayer memlayer"
  ${CMAKE_CTEST_COMMAND} --test-dir ${MEMLAYER_POCL71_BUILD_DIR} --no-tests=error -R "^runtime/"
  -E "clCreateSubDevices|test_device_address"
  --output-on-failure --timeout 300)
# The same with device 1 moving whole buffers only (migration_ranges=0):
# memlayer's engine plans whole buffers for the context.
memlayer_pocl71_test(pocl71_suite_runtime_device_without_ranges "memlayer memlayer"
  ${CMAKE_CTEST_COMMAND} --test-dir ${MEMLAYER_POCL71_BUILD_DIR} --no-tests=error -R "^runtime/"
  -E "clCreateSubDevices|test_device_address"
  --output-on-failure --timeout 300)
set_property(TEST pocl71_suite_runtime_device_without_ranges APPEND PROPERTY ENVIRONMENT
  "POCL_MEMLAYER1_PARAMETERS=migration_ranges=0")
# The same on three memlayer devices (its migration tests use them all).
# Also left out: clCreateProgramWithBinary, which fails on three of 7.1's own
# cpu devices as well (CL_INVALID_VALUE from clGetProgramInfo at its line
# 170).
memlayer_pocl71_test(pocl71_suite_runtime_3dev "memlayer memlayer memlayer"
  ${CMAKE_CTEST_COMMAND} --test-dir ${MEMLAYER_POCL71_BUILD_DIR} --no-tests=error -R "^runtime/"
  -E "clCreateSubDevices|test_device_address|clCreateProgramWithBinary"
  --output-on-failure --timeout 300)
# And its tests/regression, whole (104 tests; the 18 that skip skip on 7.1's
# cpu devices too).
memlayer_pocl71_test(pocl71_suite_regression "memlayer memlayer"
  ${CMAKE_CTEST_COMMAND} --test-dir ${MEMLAYER_POCL71_BUILD_DIR} --no-tests=error -R "^regression/"
  --output-on-failure --timeout 300)
# The same on three memlayer devices.
memlayer_pocl71_test(pocl71_suite_regression_3dev "memlayer memlayer memlayer"
  ${CMAKE_CTEST_COMMAND} --test-dir ${MEMLAYER_POCL71_BUILD_DIR} --no-tests=error -R "^regression/"
  --output-on-failure --timeout 300)

# These run PoCL's own tests in PoCL's build folder, one at a time: two runs
# of one test at once race on what it writes there (test_kernel_cache_includes
# rewrites its include files: one run then built the other's kernel).
set_property(TEST pocl71_suite_runtime pocl71_suite_runtime_device_without_ranges pocl71_suite_runtime_3dev
  pocl71_suite_regression pocl71_suite_regression_3dev PROPERTY RESOURCE_LOCK pocl71_build_folder)

# A bad device parameter: the device is left out and stderr says why.
# (memlayer-cl-stress then finds no device: exit status 2.)
memlayer_pocl71_test(pocl71_bad_parameter memlayer ${MEMLAYER_EXPECT_EXIT} 2
  "memlayer device 0: memlayer parameters: unknown key 'size'" "no OpenCL devices" -- $<TARGET_FILE:memlayer-cl-stress> --ops 1)
set_property(TEST pocl71_bad_parameter APPEND PROPERTY ENVIRONMENT "POCL_MEMLAYER0_PARAMETERS=size=1G")

# The build script's bad inputs: exit status 1 and a one-line message that
# names the fix (tests/expect_exit.sh). They build nothing.
set(build_pocl ${PROJECT_SOURCE_DIR}/drivers/pocl/build-pocl.sh)
function(memlayer_pocl71_error_test name message)
  add_test(NAME ${name} COMMAND ${CMAKE_COMMAND} -E env ${ARGN} ${MEMLAYER_EXPECT_EXIT} 1 --one-line-error "${message}" --
                                ${build_pocl} --pocl=7.1 --print-dir)
  set_tests_properties(${name} PROPERTIES LABELS pocl71 TIMEOUT 60)
endfunction()
memlayer_pocl71_error_test(pocl71_error_no_tarball_set
  "POCL71_TARBALL is not set (download pocl-7.1.tar.xz from https://github.com/pocl/pocl/releases/tag/v7.1" --unset=POCL71_TARBALL)
memlayer_pocl71_error_test(pocl71_error_tarball_missing
  "POCL71_TARBALL=/nonexistent/pocl-7.1.tar.xz not found (download pocl-7.1.tar.xz" POCL71_TARBALL=/nonexistent/pocl-7.1.tar.xz)
# Not a tarball at all, and PoCL 3.1's (another version's) tarball.
memlayer_pocl71_error_test(pocl71_error_not_a_tarball
  "is not a PoCL 7.1 tarball" POCL71_TARBALL=${PROJECT_SOURCE_DIR}/CMakeLists.txt)
if(EXISTS /usr/src/pocl.tar.xz)
  memlayer_pocl71_error_test(pocl71_error_wrong_version_tarball
    "POCL71_TARBALL=/usr/src/pocl.tar.xz is not a PoCL 7.1 tarball" POCL71_TARBALL=/usr/src/pocl.tar.xz)
endif()
memlayer_pocl71_error_test(pocl71_error_no_llvm19
  "/nonexistent/llvm-config-19 not found: PoCL 7.1 needs LLVM 19 (./memlayer deps-pocl71"
  POCL71_TARBALL=${MEMLAYER_POCL71_TARBALL} POCL71_LLVM_CONFIG=/nonexistent/llvm-config-19)

# PoCL-R: memlayer devices behind PoCL 7.1's remote servers (pocld), each a
# separate memory, started on 127.0.0.1 by drivers/pocl/pocl-cluster.sh for
# one test and stopped after it (doc/scale-out.md). The client runs with its
# stdin at /dev/null.
set(pocl_cluster ${PROJECT_SOURCE_DIR}/drivers/pocl/pocl-cluster.sh)
# memlayer_pocl71_remote_test(name servers devices command...): `command`
# as the client of `servers` servers, each serving `devices`.
function(memlayer_pocl71_remote_test name servers devices)
  add_test(NAME ${name} COMMAND ${pocl_cluster} run --build ${MEMLAYER_POCL71_BUILD_DIR}
                                --servers ${servers} --devices ${devices} -- ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS pocl71 TIMEOUT 600)
endfunction()
# The servers listen only on 127.0.0.1, a client with stdin at /dev/null
# lists their devices, and stop ends exactly the servers it started.
add_test(NAME pocl71_remote_cluster COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/remote_cluster_test.sh ${MEMLAYER_POCL71_BUILD_DIR})
set_tests_properties(pocl71_remote_cluster PROPERTIES LABELS pocl71 TIMEOUT 300)
# The migration tests across two servers, one memlayer device each:
# disjoint sub-buffers of one parent written on both, a read|write map, host
# threads on quarters of shared buffers, and the bytes a sub-buffer step
# moves (its own, server to server: patches/pocl-7.1-memlayer-remote.patch).
memlayer_pocl71_remote_test(pocl71_remote_migration 2 memlayer $<TARGET_FILE:pocl_migration_test>)
# A server killed under queued work: its commands end failed within a
# watchdog, and the other server's buffer reads back whole.
memlayer_pocl71_remote_test(pocl71_remote_server_lost 2 memlayer $<TARGET_FILE:pocl_remote_test>
  --gtest_filter=RemoteServers.ALostServerFailsItsCommandsAndTheOtherKeepsItsBuffers)
# A connection to a server's peer port that does not present the session's
# key is refused; the servers the client introduced still move its buffers.
memlayer_pocl71_remote_test(pocl71_remote_peer_key 2 memlayer $<TARGET_FILE:pocld_peer_test>)
# Three contexts at a time on one remote device, from two host threads,
# released out of order, every read checked.
memlayer_pocl71_remote_test(pocl71_remote_contexts 2 memlayer $<TARGET_FILE:pocl_remote_test>
  --gtest_filter=RemoteServers.SeveralContextsOnOneRemoteDevice)
# The OpenCL stress program on four remote devices (two servers, two
# memlayer devices each), every read checked: kernels, rect reads and writes
# with padded host rows, copies, fills, maps, migrations; sub-buffers, then
# overlapping sub-buffers with three queues a device.
memlayer_pocl71_remote_test(pocl71_remote_stress 2 "memlayer memlayer" $<TARGET_FILE:memlayer-cl-stress> --ops 1500 --seed 11)
memlayer_pocl71_remote_test(pocl71_remote_stress_overlapping 2 "memlayer memlayer" $<TARGET_FILE:memlayer-cl-stress>
  --ops 1000 --seed 12 --sub-buffers 2 --queues-per-device 3)
# PoCL 7.1's tests/runtime as the client of two servers (memlayer's engine in
# the client). Left out besides the local run's two: six that fail the same
# way with 7.1's own engine on remote devices, for what PoCL-R does not
# forward: build options naming the client's files (clBuildProgram,
# test_kernel_cache_includes: -I of a client folder; test_compile_n_link:
# embedded headers, CL_INVALID_OPERATION), kernels' printf output (it is
# printed by the server: clFinish, clCreateKernelsInProgram), and
# multi-device command buffers (test_command_buffer_multi_device: -1138).
memlayer_pocl71_remote_test(pocl71_remote_suite_runtime 2 memlayer
  ${CMAKE_CTEST_COMMAND} --test-dir ${MEMLAYER_POCL71_BUILD_DIR} --no-tests=error -R "^runtime/"
  -E "clCreateSubDevices|test_device_address|clBuildProgram$|test_kernel_cache_includes|clFinish|clCreateKernelsInProgram|test_command_buffer_multi_device|test_compile_n_link"
  --output-on-failure --timeout 300)
set_property(TEST pocl71_remote_suite_runtime APPEND PROPERTY RESOURCE_LOCK pocl71_build_folder)
# pocl-cluster.sh's bad inputs: exit status 1 and one line naming the
# problem; no server starts.
function(memlayer_cluster_error_test name message)
  add_test(NAME ${name} COMMAND ${MEMLAYER_EXPECT_EXIT} 1 --one-line-error "${message}" -- ${pocl_cluster} ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS pocl71 TIMEOUT 60)
endfunction()
set(cluster_state ${CMAKE_CURRENT_BINARY_DIR}/cluster-error-state)
memlayer_cluster_error_test(pocl71_cluster_error_no_build "no --build DIR" start ${cluster_state})
memlayer_cluster_error_test(pocl71_cluster_error_missing_build "--build /nonexistent: no such folder"
  start ${cluster_state} --build /nonexistent)
memlayer_cluster_error_test(pocl71_cluster_error_not_a_pocld_build "pocld/pocld not found: PoCL 7.1 is built without its remote server"
  start ${cluster_state} --build ${CMAKE_CURRENT_BINARY_DIR})
memlayer_cluster_error_test(pocl71_cluster_error_servers "--servers 0: give a number from 1 to 99"
  start ${cluster_state} --build ${MEMLAYER_POCL71_BUILD_DIR} --servers 0)
memlayer_cluster_error_test(pocl71_cluster_error_port "--port 80: give a port from 1024 to 65000"
  start ${cluster_state} --build ${MEMLAYER_POCL71_BUILD_DIR} --port 80)
memlayer_cluster_error_test(pocl71_cluster_error_no_devices "--devices is empty"
  start ${cluster_state} --build ${MEMLAYER_POCL71_BUILD_DIR} --devices " ")
memlayer_cluster_error_test(pocl71_cluster_error_stop_nothing "holds no cluster" stop ${CMAKE_CURRENT_BINARY_DIR}/no-such-cluster)
