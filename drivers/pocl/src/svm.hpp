// Shared virtual memory on memlayer devices (doc/svm.md): coarse-grained
// buffer SVM out of one SvmSpace per process
// (memlayer/drivers/svm_space.hpp), shared by every memlayer device of every
// context. A memlayer device computes on the host's CPU in this process, so
// an SVM pointer is the same bytes for the host and each device: kernels get
// SVM pointers as they are, and pointers stored inside SVM buffers hold.
//
// A buffer made with CL_MEM_USE_HOST_PTR over SVM bytes (the user's, or
// PoCL 7.1's shadow buffer of each SVM allocation) shares them: its storage
// on a memlayer device is those bytes, never an arena copy (svm_storage), so
// writes through the buffer and through the pointer meet. A migration
// between two such copies is a copy of bytes onto themselves, which the
// driver skips.
#pragma once

#include <cstdint>

#include "memlayer/drivers/svm_space.hpp"
#include "pocl_compat.hpp"

namespace memlayer::pocl {

/// The process's SVM space, or nullptr until a memlayer device made the
/// first SVM allocation. Thread-safe, O(1).
drivers::SvmSpace* svm_space() noexcept;

/// The process's SVM space, reserved on the first call with `size` bytes of
/// addresses (a device's svm_space parameter). An error names why the
/// space could not be reserved; later calls return the same space whatever
/// their size. Thread-safe.
drivers::DevResult<drivers::SvmSpace*> svm_space(std::uint64_t size);

/// The SVM bytes that are `mem`'s storage on a memlayer device: its host
/// pointer when it is a CL_MEM_USE_HOST_PTR buffer lying wholly inside one
/// live SVM allocation, else nullptr (the buffer gets arena storage).
/// O(log SVM allocations).
void* svm_storage(cl_mem mem);

/// Whether `p` lies in the SVM space: storage that is SVM bytes, which
/// freeing a buffer leaves alone. O(1).
bool is_svm_storage(const void* p) noexcept;

}  // namespace memlayer::pocl
