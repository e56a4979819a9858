#include "model/kv_cache.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/convert.h"

namespace ragkv::model {

absl::StatusOr<KVCache> KVCache::Create(const ModelConfig& config, int64_t capacity_tokens) {
  return Create(config, capacity_tokens, {});
}

absl::StatusOr<KVCache> KVCache::Create(const ModelConfig& config, int64_t capacity_tokens,
                                        std::vector<float> storage) {
  ModelConfig c = config;
  RETURN_IF_ERROR(c.Validate());
  if (capacity_tokens <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("KVCache: capacity_tokens must be > 0, got ",
                                                   capacity_tokens));
  }
  KVCache kv;
  kv.n_layers_ = c.n_layers;
  kv.kv_heads_ = c.n_kv_heads;
  kv.head_dim_ = c.head_dim;
  kv.capacity_ = capacity_tokens;
  kv.data_ = std::move(storage);
  kv.data_.assign(KVCacheFloats(c, capacity_tokens), 0.0f);
  return kv;
}

absl::Status KVCache::set_num_tokens(int64_t n) {
  if (n < 0 || n > capacity_) {
    return absl::OutOfRangeError(
        absl::StrCat("KVCache: num_tokens ", n, " outside [0, capacity ", capacity_, "]"));
  }
  num_tokens_ = n;
  return absl::OkStatus();
}

LayerKVView KVCache::Layer(int l, int64_t n) const {
  LayerKVView v;
  float* base = const_cast<float*>(data_.data()) + LayerOffset(l);
  for (int which = 0; which < 2; ++which) {
    (which == 0 ? v.k : v.v) = kernels::TensorView::Strided(
        base + which * PlaneSize(), kernels::DType::kF32, {kv_heads_, n, head_dim_},
        {capacity_ * head_dim_, head_dim_, 1});
  }
  return v;
}

namespace {
absl::Status CheckRange(const KVCache& kv, int l, int64_t begin, int64_t count,
                        kernels::DType dtype) {
  if (l < 0 || l >= kv.n_layers()) {
    return absl::InvalidArgumentError(absl::StrCat("KVCache: layer ", l, " out of range"));
  }
  if (begin < 0 || count < 0 || begin + count > kv.capacity_tokens()) {
    return absl::OutOfRangeError(absl::StrCat("KVCache: tokens [", begin, ", ", begin + count,
                                              ") outside capacity ", kv.capacity_tokens()));
  }
  if (dtype != kernels::DType::kF32 && dtype != kernels::DType::kF16 &&
      dtype != kernels::DType::kBF16) {
    return absl::InvalidArgumentError("KVCache: export dtype must be f32, f16 or bf16");
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status KVCache::ExportLayer(int l, int64_t begin, int64_t count, kernels::DType dtype,
                                  void* dst_k, void* dst_v) const {
  RETURN_IF_ERROR(CheckRange(*this, l, begin, count, dtype));
  if (count == 0) return absl::OkStatus();
  const size_t es = kernels::DTypeSize(dtype);
  const int64_t n = count * head_dim_;
  LayerKVView view = Layer(l, capacity_);
  for (int which = 0; which < 2; ++which) {
    const float* src = (which == 0 ? view.k : view.v).as<float>();
    char* dst = static_cast<char*>(which == 0 ? dst_k : dst_v);
    for (int h = 0; h < kv_heads_; ++h) {
      const float* s = src + h * capacity_ * head_dim_ + begin * head_dim_;
      char* d = dst + h * n * es;
      if (dtype == kernels::DType::kF32) {
        std::memcpy(d, s, n * sizeof(float));
      } else {
        RETURN_IF_ERROR(kernels::Convert(kernels::TensorView::Contiguous(s, kernels::DType::kF32, {n}),
                                         kernels::TensorView::Contiguous(d, dtype, {n})));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status KVCache::ImportLayer(int l, int64_t begin, int64_t count, kernels::DType dtype,
                                  const void* src_k, const void* src_v) {
  RETURN_IF_ERROR(CheckRange(*this, l, begin, count, dtype));
  if (count == 0) return absl::OkStatus();
  const size_t es = kernels::DTypeSize(dtype);
  const int64_t n = count * head_dim_;
  for (int which = 0; which < 2; ++which) {
    float* dst = which == 0 ? k_data(l) : v_data(l);
    const char* src = static_cast<const char*>(which == 0 ? src_k : src_v);
    for (int h = 0; h < kv_heads_; ++h) {
      float* d = dst + h * capacity_ * head_dim_ + begin * head_dim_;
      const char* s = src + h * n * es;
      if (dtype == kernels::DType::kF32) {
        std::memcpy(d, s, n * sizeof(float));
      } else {
        RETURN_IF_ERROR(kernels::Convert(kernels::TensorView::Contiguous(s, dtype, {n}),
                                         kernels::TensorView::Contiguous(d, kernels::DType::kF32, {n})));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace ragkv::model
