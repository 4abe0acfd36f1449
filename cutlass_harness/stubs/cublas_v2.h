// tileprobe stub: see cublasLt.h.
#pragma once
#include "cublasLt.h"
