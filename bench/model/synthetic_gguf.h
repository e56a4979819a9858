// synthetic_gguf.h: a "synthetic:<spec>" model (model/synthetic.h) written
// as a GGUF (architecture llama, F32 or F16 matrices) and optionally
// quantized by the pinned llama.cpp's own quantizer, so `ragkv bench prefill
// --compare llama.cpp` runs both engines on the very same file of any shape
// and encoding without a download.
#ifndef RAGKV_BENCH_MODEL_SYNTHETIC_GGUF_H_
#define RAGKV_BENCH_MODEL_SYNTHETIC_GGUF_H_

#include <string>

#include "absl/status/status.h"

namespace ragkv::model {

// IsRandomSpec: "moe:..." or "gemma3:..." (a seeded random GGUF of that
// architecture, tests/support/random_model.h; keys in synthetic_gguf.cc
// ParseRandomSpec). It exists only as a written file.
bool IsRandomSpec(const std::string& spec);

// WriteSyntheticGguf: `spec` (e.g. "synthetic:layers=4,dim=2048,..." or a
// moe: / gemma3: spec) as a
// GGUF at `path` in `encoding`: f32, f16, or a llama.cpp ftype name (q8_0,
// q4_0, q4_k_m, q5_k_m, q6_k) quantized from the f16 file by llama.cpp
// (dlopen'ed from `llamacpp_lib_dir`). InvalidArgument for an unknown
// encoding; errors of the writer / quantizer pass through.
absl::Status WriteSyntheticGguf(const std::string& spec, const std::string& encoding,
                                const std::string& llamacpp_lib_dir, const std::string& path);

}  // namespace ragkv::model

#endif  // RAGKV_BENCH_MODEL_SYNTHETIC_GGUF_H_
