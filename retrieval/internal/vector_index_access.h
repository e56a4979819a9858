// internal/vector_index_access.h: raw FAISS access for retrieval's own
// benchmark (ragkv API vs raw FAISS on the same index). Not for other modules.
#ifndef RAGKV_RETRIEVAL_INTERNAL_VECTOR_INDEX_ACCESS_H_
#define RAGKV_RETRIEVAL_INTERNAL_VECTOR_INDEX_ACCESS_H_

#include <faiss/IndexIDMap.h>

#include "retrieval/vector_index.h"

namespace ragkv::retrieval::internal {

class VectorIndexAccess {
 public:
  // Raw: the IndexIDMap2. The caller must not mutate the VectorIndex while
  // using it (no lock is held).
  static const faiss::IndexIDMap2* Raw(const VectorIndex& index) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return index.index_.get();
  }
};

}  // namespace ragkv::retrieval::internal

#endif  // RAGKV_RETRIEVAL_INTERNAL_VECTOR_INDEX_ACCESS_H_
