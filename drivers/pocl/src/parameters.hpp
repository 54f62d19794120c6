// The memlayer PoCL device's parameters, from POCL_MEMLAYER<n>_PARAMETERS
// (PoCL's per-device parameter mechanism): comma-separated key=value pairs,
// sizes with an optional K, M or G suffix (powers of 1024), e.g.
//   POCL_MEMLAYER0_PARAMETERS="global_mem=256M,local_mem=64K,compute_units=2"
//
//   global_mem     the device's global memory (its arena), default 1G
//   local_mem      local memory per compute unit, default 64K, at least 32K
//                  (the OpenCL 3.0 minimum)
//   compute_units  worker threads = compute units, default: the host's cores
//   numa_node      where the arena lives, default: the device index modulo
//                  the node count
//   alignment      CL_DEVICE_MEM_BASE_ADDR_ALIGN in bytes (128 to 4096; 128 is
//                  the largest OpenCL C type), default 128
//   transfer_faults  fault injection, for testing: each transfer command on
//                  the device (buffer read, write, copy, their rect forms,
//                  migrations) fails before it starts with this probability
//                  (0 to 1, e.g. 0.001), default 0; so does a read or write
//                  PoCL asks of the driver outside a command (its bytes are
//                  not moved: those cannot report a failure)
//   peer_read_faults  fault injection, for testing: each try of a
//                  device-to-device migration that reads from this device
//                  (another memlayer device runs it) fails with this
//                  probability, default 0: a link out of the device that
//                  fails while its host link works
//   fault_seed     the seed of those draws, default 1
//   migration_ranges  1 (default): the device declares that its migrations
//                  move only their byte range (PoCL 7.1's
//                  honours_migration_ranges), so memlayer's engine plans
//                  byte ranges for it; 0: it behaves as a driver without the
//                  capability (CUDA, PoCL's proxy): it does not declare it,
//                  and each migration it runs moves its whole buffer,
//                  whatever range it names; memlayer's engine then plans
//                  whole buffers in every context with it. For testing that
//                  fallback; no effect on PoCL 3.1, whose patch gives every
//                  driver ranges
//   svm_space      the address space reserved for the process's SVM
//                  allocations (drivers/pocl/src/svm.hpp), default 64G of
//                  addresses (no memory until used); 0: the device offers no
//                  SVM. The space is reserved once, at the first SVM
//                  allocation, with the size of the device that makes it
//
// Pure C++, no PoCL: the parser is unit-tested in memlayer's own tests.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "memlayer/drivers/device_memory.hpp"

namespace memlayer::pocl {

struct DriverParameters {
  std::uint64_t global_mem = std::uint64_t{1} << 30;
  std::uint64_t local_mem = std::uint64_t{64} << 10;
  unsigned compute_units = 0;  ///< 0: the host's cores
  int numa_node = -1;          ///< -1: the device index modulo the nodes
  std::uint64_t alignment = 128;
  double transfer_faults = 0;   ///< probability in [0, 1]
  double peer_read_faults = 0;  ///< probability in [0, 1]
  std::uint64_t fault_seed = 1;
  bool migration_ranges = true;
  std::uint64_t svm_space = std::uint64_t{64} << 30;  ///< 0: no SVM on this device
};

/// Parses `text` (null or empty: all defaults). An unknown key, a malformed
/// or out-of-range value is an error naming it; nothing is half-applied.
drivers::DevResult<DriverParameters> parse_parameters(const char* text);

}  // namespace memlayer::pocl
