// tula-train: every standard header Eigen/Core uses, for gemm_avx2.cpp and gemm_avx512.cpp
// to include BEFORE they switch the compiler's target (see gemm_avx2.cpp): so the inline
// functions of these headers are compiled with the build's flags only. Not a public header.
#pragma once
#include <malloc.h>
#include <stdint.h>

#include <algorithm>
#include <array>
#include <cassert>
#include <cerrno>
#include <cfloat>
#include <climits>
#include <cmath>
#include <complex>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <immintrin.h>
#include <iosfwd>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>
