// isa_avx2.cc (internal): isa_impl.inc compiled for Isa::kAvx2 (see CMakeLists.txt
// for the flags).
#define RAGKV_ISA_NS avx2
#define RAGKV_ISA_WIDTH 8
#define RAGKV_ISA_ENUM ::ragkv::kernels::Isa::kAvx2
#include "kernels/internal/isa_impl.inc"

namespace ragkv::kernels::internal {
const IsaTable& Avx2Table() { return avx2::Table(); }
}  // namespace ragkv::kernels::internal
