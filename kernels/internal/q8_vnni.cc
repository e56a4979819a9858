// q8_vnni.cc (internal): q8_tile.inc with AVX-512 VNNI vpdpbusd on 256-bit
// vectors (CMakeLists.txt: flags).
#define RAGKV_Q8_TILE Q8TileVnni
#define RAGKV_Q8_VNNI 1
#include "kernels/internal/q8_tile.inc"
