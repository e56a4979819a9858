#include "kvstore/process_tuning.h"

#include <malloc.h>

namespace ragkv::kvstore {

bool TuneMallocForLargeValues() {
  const bool a = mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1;
  const bool b = mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1;
  return a && b;
}

}  // namespace ragkv::kvstore
