// tensor.h: DType and TensorView, the non-owning tensor vocabulary of ragkv.
//
// A TensorView is (pointer, dtype, rank <= 4, shape, strides in elements). It
// owns nothing and is passed by value; the caller keeps the memory alive for
// as long as a kernel runs. Thread safety: a view is a plain value; concurrent
// kernels may read the same memory, writers need exclusive access.
#ifndef RAGKV_KERNELS_TENSOR_H_
#define RAGKV_KERNELS_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace ragkv::kernels {

// DType: element type. Values are part of the on-disk KV format: never renumber.
enum class DType : uint8_t { kF32 = 0, kF16 = 1, kBF16 = 2, kI8 = 3 };

// DTypeSize: bytes per element.
constexpr size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI8: return 1;
  }
  return 0;
}
const char* DTypeName(DType t);

inline constexpr int kMaxRank = 4;

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int rank = 0;
  int64_t shape[kMaxRank] = {0, 0, 0, 0};
  int64_t stride[kMaxRank] = {0, 0, 0, 0};  // in elements, not bytes

  // Contiguous: a row-major view of `dims` over `data`.
  static TensorView Contiguous(void* data, DType dtype, std::initializer_list<int64_t> dims);
  // Contiguous view of const memory (kernels that read it never write it).
  static TensorView Contiguous(const void* data, DType dtype, std::initializer_list<int64_t> dims) {
    return Contiguous(const_cast<void*>(data), dtype, dims);
  }
  // Contiguous(nullptr, ...): a view with no data (shape-only; kernels reject
  // it unless numel is 0). Disambiguates the two overloads above.
  static TensorView Contiguous(std::nullptr_t, DType dtype, std::initializer_list<int64_t> dims) {
    return Contiguous(static_cast<void*>(nullptr), dtype, dims);
  }

  // Strided: a view of `dims` with element strides `strides` (one per dim;
  // a mismatch in count, or more than kMaxRank, gives rank 0, which every
  // kernel rejects).
  static TensorView Strided(void* data, DType dtype, std::initializer_list<int64_t> dims,
                            std::initializer_list<int64_t> strides);
  static TensorView Strided(const void* data, DType dtype, std::initializer_list<int64_t> dims,
                            std::initializer_list<int64_t> strides) {
    return Strided(const_cast<void*>(data), dtype, dims, strides);
  }

  int64_t numel() const;
  int64_t dim(int i) const { return shape[i]; }
  bool IsContiguous() const;
  template <typename T>
  T* as() const { return static_cast<T*>(data); }
  // DebugString: e.g. "f32[8,512,64]".
  std::string DebugString() const;
};

}  // namespace ragkv::kernels

#endif  // RAGKV_KERNELS_TENSOR_H_
