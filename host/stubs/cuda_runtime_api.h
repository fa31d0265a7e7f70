// Stub of the CUDA runtime's types (cuda_runtime_api.h): declarations only.
// See README.md.
#pragma once
#include "cuda.h"

typedef CUstream cudaStream_t;
typedef enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 } cudaDataType;
