#include "memlayer/runtime/device_driver.hpp"

namespace memlayer::runtime {

Status DeviceDriver::copy_from_peer(DeviceDriver& source, DeviceAddress, DeviceAddress, std::uint64_t) {
  return Status::error(cl::kInvalidValue,
                       info().name + ": no direct copy path from " + source.info().name);
}

}  // namespace memlayer::runtime
