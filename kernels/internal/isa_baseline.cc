// isa_baseline.cc (internal): isa_impl.inc compiled for Isa::kScalar (see CMakeLists.txt
// for the flags).
#define RAGKV_ISA_NS baseline
#define RAGKV_ISA_WIDTH 4
#define RAGKV_ISA_ENUM ::ragkv::kernels::Isa::kScalar
#include "kernels/internal/isa_impl.inc"

namespace ragkv::kernels::internal {
const IsaTable& BaselineTable() { return baseline::Table(); }
}  // namespace ragkv::kernels::internal
