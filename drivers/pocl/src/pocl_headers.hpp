// PoCL's internal headers that 3.1 and 7.1 share, as the driver's C++ sees
// them. Some have no extern "C" guard of their own. The ones only one
// version has are in pocl_compat.hpp.
#pragma once

#include "pocl_cl.h"
#include "pocl_util.h"
#include "pocl_mem_management.h"
#include "pocl_runtime_config.h"
#include "common.h"
#include "common_driver.h"
#include "devices.h"
#include "pocl_image_types.h"
#include "pocl-memlayer.h"
#include "pocl_workgroup_func.h"

extern "C" {
#include "cpuinfo.h"
#include "topology/pocl_topology.h"
}
