# memlayer's migration engine inside PoCL: the tests that hold on every PoCL
# it is built into (3.1: patches/pocl-3.1-memlayer.patch; 7.1:
# patches/pocl-7.1-memlayer-engine.patch). Included from
# tests/pocl/CMakeLists.txt, which defines the programs; each PoCL's own file
# calls memlayer_pocl_engine_suite() once.

# memlayer_pocl_engine_suite(label env cpu api stress): registers the suite
# for one PoCL build. label: the ctest label; env: that build's environment
# (a list: the ICD loader's variables); cpu: PoCL's host-memory CPU device
# (3.1 pthread, 7.1 cpu); api, stress: the name prefixes of the OpenCL API
# tests and of the stress runs (3.1 keeps the names these tests always had:
# pocl_ and none).
function(memlayer_pocl_engine_suite label env cpu api stress)
  # suite_test(name devices command...): one test (suite_env adds to its
  # environment).
  function(suite_test name devices)
    add_test(NAME ${name} COMMAND ${ARGN})
    set_tests_properties(${name} PROPERTIES LABELS ${label} TIMEOUT 900 ENVIRONMENT "${env};POCL_DEVICES=${devices}")
  endfunction()
  function(suite_env name)
    set_property(TEST ${name} APPEND PROPERTY ENVIRONMENT ${ARGN})
  endfunction()

  suite_test(${api}images "memlayer memlayer" $<TARGET_FILE:pocl_image_test>)
  # Coarse-grained buffer SVM (doc/svm.md) on two devices and on one; devices
  # given no SVM space report none.
  suite_test(${api}svm "memlayer memlayer" $<TARGET_FILE:pocl_svm_test> --gtest_filter=Svm.*)
  suite_test(${api}svm_1dev memlayer $<TARGET_FILE:pocl_svm_test> --gtest_filter=Svm.*)
  suite_test(${api}svm_off "memlayer memlayer" $<TARGET_FILE:pocl_svm_test> --gtest_filter=SvmOff.*)
  # Beside PoCL's CPU device: the memlayer space serves the context, and an
  # enqueued free on the CPU device's queue gives the pointer back to it
  # (pocl-*-svm-free-uses-the-allocating-device.patch; PoCL freed it with
  # the queue's device's allocator: a crash).
  suite_test(${api}svm_beside_cpu "${cpu} memlayer" $<TARGET_FILE:pocl_svm_test> --gtest_filter=Svm.*)
  suite_env(${api}svm_off "POCL_MEMLAYER0_PARAMETERS=svm_space=0" "POCL_MEMLAYER1_PARAMETERS=svm_space=0"
            "MEMLAYER_EXPECT_SVM=0")
  suite_test(${api}failure "memlayer memlayer" $<TARGET_FILE:pocl_failure_test>
    --gtest_filter=-PoclFaults.*:PoclPeerFaults.*:PoclWriteBackFaults.*:PoclLinkFailures.*)
  # Device 0's peer links failing (its host link working): migrations from it
  # are made from the host copy instead, or fail losing nothing.
  suite_test(${api}failure_peer_faults "memlayer memlayer" $<TARGET_FILE:pocl_failure_test> --gtest_filter=PoclPeerFaults.*)
  suite_env(${api}failure_peer_faults "POCL_MEMLAYER0_PARAMETERS=peer_read_faults=1")
  # The same program with device 0 failing every transfer (fault injection).
  suite_test(${api}failure_faults "memlayer memlayer" $<TARGET_FILE:pocl_failure_test> --gtest_filter=PoclFaults.*)
  suite_env(${api}failure_faults "POCL_MEMLAYER0_PARAMETERS=transfer_faults=1")
  # A write-back of the only copy of bytes that fails every try (device 0,
  # 1 MiB, fails every transfer): the command that wanted the room fails,
  # the bytes stay (the adapter's synchronous write-back lost them).
  suite_test(${api}failure_write_back_faults "memlayer memlayer" $<TARGET_FILE:pocl_failure_test>
    --gtest_filter=PoclWriteBackFaults.*)
  suite_env(${api}failure_write_back_faults "POCL_MEMLAYER0_PARAMETERS=global_mem=1M,transfer_faults=1"
      "POCL_MEMLAYER_ROOM_WAIT_MS=500")
  # Links of commands to what they wait for that fail (out of host memory,
  # injected after the first: POCL_MEMLAYER_TEST_LINKS): no command runs out
  # of order (the adapter dropped the failure, and the command ran at once).
  suite_test(${api}failure_link_failures "memlayer memlayer" $<TARGET_FILE:pocl_failure_test>
    --gtest_filter=PoclLinkFailures.*)
  suite_env(${api}failure_link_failures "POCL_MEMLAYER_TEST_LINKS=1")

  suite_test(${api}device memlayer $<TARGET_FILE:pocl_device_test> --gtest_filter=-*QueuedWork*)
  suite_env(${api}device "POCL_MEMLAYER0_PARAMETERS=global_mem=64M,local_mem=32K,compute_units=2"
      "POCL_MEMLAYER_ROOM_WAIT_MS=500")
  # 21 MiB of buffers queued without waiting on a device of 8 MiB
  # (doc/engine.md, memory pressure with work in flight).
  suite_test(${api}device_pressure memlayer $<TARGET_FILE:pocl_device_test> --gtest_filter=*QueuedWork*)
  suite_env(${api}device_pressure "POCL_MEMLAYER0_PARAMETERS=global_mem=8M,local_mem=32K,compute_units=2")

  # A working set 2-3 times each device's memory in buffers of about 1 MiB,
  # non-blocking on out-of-order queues, behind a user event opened later,
  # on 2, 3 and 4 devices of 8 MiB (issue 33).
  foreach(n 2 3 4)
    string(REPEAT "memlayer " ${n} devices)
    string(STRIP "${devices}" devices)
    suite_test(${api}oversubscribed_${n}dev "${devices}" $<TARGET_FILE:pocl_oversubscribed_test>)
    math(EXPR last "${n} - 1")
    foreach(d RANGE ${last})
      suite_env(${api}oversubscribed_${n}dev "POCL_MEMLAYER${d}_PARAMETERS=global_mem=8M")
    endforeach()
  endforeach()

  suite_test(${api}migration "memlayer memlayer" $<TARGET_FILE:pocl_migration_test>)

  # A bad engine choice is named on stderr; the build's default engine runs.
  suite_test(${api}bad_engine_choice "memlayer memlayer" ${MEMLAYER_EXPECT_EXIT} 0
    "POCL_MEMLAYER_MIGRATION must be 0 or 1, not 'yes'; using 1" " 0 mismatches" -- $<TARGET_FILE:memlayer-cl-stress> --ops 20)
  suite_env(${api}bad_engine_choice "POCL_MEMLAYER_MIGRATION=yes")

  suite_test(${stress}cl_stress_2dev "memlayer memlayer" $<TARGET_FILE:memlayer-cl-stress> --ops 3000 --seed 1)
  suite_test(${stress}cl_stress_3dev "memlayer memlayer memlayer" $<TARGET_FILE:memlayer-cl-stress>
    --ops 3000 --seed 2 --buffers 6 --queues-per-device 3)
  suite_test(${stress}cl_stress_4dev "memlayer memlayer memlayer memlayer" $<TARGET_FILE:memlayer-cl-stress> --ops 4000 --seed 4)
  # With the driver's fault injection (transfer_faults): commands fail, and
  # every read of what the model still knows is checked (cl_stress.cpp,
  # --faults). These runs found: engine waits skipped once they had failed
  # (commands ran on copies that had failed), commands failed inside PoCL's
  # broadcast and events failed at enqueue while another dependency was
  # pending (freed events: crashes), and commands that never ran counted as
  # failed while running (their location's content lost).
  suite_test(${stress}cl_stress_faults_1dev memlayer $<TARGET_FILE:memlayer-cl-stress> --ops 3000 --seed 7 --faults 1)
  suite_env(${stress}cl_stress_faults_1dev "POCL_MEMLAYER0_PARAMETERS=transfer_faults=0.02")
  suite_test(${stress}cl_stress_faults_2dev "memlayer memlayer" $<TARGET_FILE:memlayer-cl-stress> --ops 3000 --seed 7 --faults 1)
  suite_env(${stress}cl_stress_faults_2dev
      "POCL_MEMLAYER0_PARAMETERS=transfer_faults=0.02" "POCL_MEMLAYER1_PARAMETERS=transfer_faults=0.02,fault_seed=2")
  suite_test(${stress}cl_stress_faults_3dev "memlayer memlayer memlayer" $<TARGET_FILE:memlayer-cl-stress>
    --ops 4000 --seed 5 --faults 1 --elements 2048 --queues-per-device 3)
  suite_env(${stress}cl_stress_faults_3dev
      "POCL_MEMLAYER0_PARAMETERS=transfer_faults=0.02" "POCL_MEMLAYER1_PARAMETERS=transfer_faults=0.02,fault_seed=2"
      "POCL_MEMLAYER2_PARAMETERS=transfer_faults=0.02,fault_seed=3")
  # Peer links failing half their tries as well: migrations between devices
  # are made from another copy (the host's, another device's) once their
  # tries fail, every result still checked.
  suite_test(${stress}cl_stress_faults_peer_3dev "memlayer memlayer memlayer" $<TARGET_FILE:memlayer-cl-stress>
    --ops 4000 --seed 6 --faults 1 --elements 2048 --queues-per-device 2)
  suite_env(${stress}cl_stress_faults_peer_3dev
      "POCL_MEMLAYER0_PARAMETERS=transfer_faults=0.02,peer_read_faults=0.5"
      "POCL_MEMLAYER1_PARAMETERS=transfer_faults=0.02,peer_read_faults=0.5,fault_seed=2"
      "POCL_MEMLAYER2_PARAMETERS=transfer_faults=0.02,peer_read_faults=0.5,fault_seed=3")
  # Small devices (1 MiB for 12 buffers of 128 KiB: every command evicts)
  # failing 30% of their transfers: write-backs fail and are made again, a
  # failed blocking map must not leave its buffer mapped (unevictable), and
  # a write-back another enqueue started is waited for, not taken as a full
  # device (before these two fixes, such runs on two devices failing 40%
  # ended in CL_MEM_OBJECT_ALLOCATION_FAILURE, seeds 3-5 of 3).
  suite_test(${stress}cl_stress_faults_pressure_3dev "memlayer memlayer memlayer" $<TARGET_FILE:memlayer-cl-stress>
    --ops 2000 --seed 12 --faults 1 --buffers 12 --elements 32768)
  suite_env(${stress}cl_stress_faults_pressure_3dev "POCL_MEMLAYER_ROOM_WAIT_MS=30000"
      "POCL_MEMLAYER0_PARAMETERS=global_mem=1M,transfer_faults=0.3,peer_read_faults=0.3"
      "POCL_MEMLAYER1_PARAMETERS=global_mem=1M,transfer_faults=0.3,fault_seed=2"
      "POCL_MEMLAYER2_PARAMETERS=global_mem=1M,transfer_faults=0.3,fault_seed=3,peer_read_faults=0.5")
  # One buffer, whole, one queue per device: the most failures per byte.
  suite_test(${stress}cl_stress_faults_one_buffer "memlayer memlayer" $<TARGET_FILE:memlayer-cl-stress>
    --ops 3000 --seed 8 --faults 1 --elements 1024 --sub-buffers 0 --queues-per-device 1 --buffers 1)
  suite_env(${stress}cl_stress_faults_one_buffer
      "POCL_MEMLAYER0_PARAMETERS=transfer_faults=0.02" "POCL_MEMLAYER1_PARAMETERS=transfer_faults=0.02,fault_seed=2")

  # A host-memory CPU device beside a memlayer device: migrations between
  # PoCL's shared memory and memlayer's.
  suite_test(${stress}cl_stress_mixed "${cpu} memlayer" $<TARGET_FILE:memlayer-cl-stress> --ops 2000 --seed 3)
endfunction()
