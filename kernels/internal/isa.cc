#include "kernels/internal/isa.h"

namespace ragkv::kernels::internal {

const IsaTable& ActiveTable() {
  switch (ActiveIsa()) {
    case Isa::kAvx512: return Avx512Table();
    case Isa::kAvx2: return Avx2Table();
    case Isa::kScalar: break;
  }
  return BaselineTable();
}

}  // namespace ragkv::kernels::internal
