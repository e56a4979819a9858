// q8_avx2.cc (internal): q8_tile.inc with AVX2 maddubs (CMakeLists.txt: flags).
#define RAGKV_Q8_TILE Q8TileAvx2
#include "kernels/internal/q8_tile.inc"
