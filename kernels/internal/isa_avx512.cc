// isa_avx512.cc (internal): isa_impl.inc compiled for Isa::kAvx512 (see CMakeLists.txt
// for the flags).
#define RAGKV_ISA_NS avx512
#define RAGKV_ISA_WIDTH 16
#define RAGKV_ISA_ENUM ::ragkv::kernels::Isa::kAvx512
#include "kernels/internal/isa_impl.inc"

namespace ragkv::kernels::internal {
const IsaTable& Avx512Table() { return avx512::Table(); }
}  // namespace ragkv::kernels::internal
