/* The memlayer device driver's entry points, for PoCL's devices.c (which
   includes this header when drivers are linked into libpocl). */
#ifndef POCL_MEMLAYER_H
#define POCL_MEMLAYER_H

#include "pocl_cl.h"
#include "prototypes.inc"

#ifdef __cplusplus
extern "C" {
#endif

GEN_PROTOTYPES (memlayer)

#ifdef __cplusplus
}
#endif

#endif
