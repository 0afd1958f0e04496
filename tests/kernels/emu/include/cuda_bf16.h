#pragma once
// Emulated bf16 types and conversions (tests only): ../../CudaEmulation.h.
#include "CudaEmulation.h"
