#include "bench/model/synthetic_gguf.h"

#include <dlfcn.h>

#include <cstdio>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "model/synthetic.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "tests/support/random_model.h"
#include "tests/support/gguf_writer.h"

#if RAGKV_HAVE_LLAMACPP_HEADERS
#include "llama.h"
#endif

namespace ragkv::model {
namespace {

// WriteParts: a llama GGUF of `p` (matrices F16 when `f16`), with a small
// vocabulary so llama.cpp loads it.
void WriteParts(const ModelParts& p, bool f16, const std::string& path) {
  testing::LlamaGgufOptions o;
  o.f16 = f16;
  o.vocab_tokens = p.config.vocab_size;
  testing::WriteLlamaGguf(p, o, path);
}

absl::Status Quantize(const std::string& lib_dir, const std::string& in, const std::string& out,
                      int ftype) {
#if RAGKV_HAVE_LLAMACPP_HEADERS
  void* lib = dlopen((lib_dir + "/libllama.v0.4.0.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return absl::NotFoundError(absl::StrCat("llama.cpp not found in ", lib_dir));
  auto defaults = reinterpret_cast<decltype(&llama_model_quantize_default_params)>(
      dlsym(lib, "llama_model_quantize_default_params"));
  auto quantize = reinterpret_cast<decltype(&llama_model_quantize)>(dlsym(lib, "llama_model_quantize"));
  if (defaults == nullptr || quantize == nullptr) return absl::NotFoundError("llama.cpp: no quantizer");
  auto log_set = reinterpret_cast<decltype(&llama_log_set)>(dlsym(lib, "llama_log_set"));
  if (log_set != nullptr) log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  llama_model_quantize_params p = defaults();
  p.ftype = static_cast<llama_ftype>(ftype);
  if (quantize(in.c_str(), out.c_str(), &p) != 0) {
    return absl::InternalError(absl::StrCat("llama_model_quantize(", in, ", ftype ", ftype, ") failed"));
  }
  return absl::OkStatus();
#else
  return absl::UnimplementedError("built without the pinned llama.cpp headers: cannot quantize");
#endif
}

// ParseRandomSpec: "moe:arch=qwen3moe,layers=4,dim=1024,heads=16,
// kv_heads=4,head_dim=64,ffn=2816,experts=8,used=2,expert_ffn=768,ctx=4096"
// (arch qwen3moe or llama = Mixtral; expert_ffn defaults to ffn, used to 2)
// or "gemma3:layers=8,dim=1024,heads=8,kv_heads=4,head_dim=128,ffn=4096,
// window=512,pattern=6" (pattern: every pattern-th layer global, default
// llama.cpp's 6). head_dim defaults to dim / heads, ctx to 4096.
absl::Status ParseRandomSpec(const std::string& spec, testing::Variant* v, testing::RandomShape* s) {
  const bool gemma = spec.rfind("gemma3:", 0) == 0;
  v->arch = gemma ? "gemma3" : "qwen3moe";
  s->head_dim = 0;
  s->context = 4096;
  int window = 0, pattern = 0;
  std::map<std::string, int*> ints = {
      {"layers", &s->layers},     {"dim", &s->dim},           {"heads", &s->heads},
      {"kv_heads", &s->kv_heads}, {"head_dim", &s->head_dim}, {"ffn", &s->ffn},
      {"ctx", &s->context}};
  if (gemma) {
    ints.insert({{"window", &window}, {"pattern", &pattern}});
  } else {
    ints.insert({{"experts", &v->experts}, {"used", &v->experts_used}, {"expert_ffn", &v->expert_ffn}});
  }
  for (absl::string_view kv : absl::StrSplit(spec.substr(spec.find(':') + 1), ',', absl::SkipEmpty())) {
    const std::pair<std::string, std::string> p = absl::StrSplit(kv, absl::MaxSplits('=', 1));
    if (p.first == "arch" && !gemma) {
      v->arch = p.second;
      continue;
    }
    auto it = ints.find(p.first);
    if (it == ints.end() || !absl::SimpleAtoi(p.second, it->second) || *it->second <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("random model spec: bad or unknown key '", kv, "'"));
    }
  }
  if (s->heads % s->kv_heads != 0) return absl::InvalidArgumentError("spec: heads % kv_heads != 0");
  if (s->head_dim == 0) s->head_dim = s->dim / s->heads;
  if (gemma) {
    v->sliding_window = static_cast<uint32_t>(window);
    if (pattern > 0) v->kv_u32.push_back({"attention.sliding_window_pattern", uint32_t(pattern)});
    return absl::OkStatus();
  }
  if (v->arch != "qwen3moe" && v->arch != "llama") {
    return absl::InvalidArgumentError("moe spec: arch must be qwen3moe or llama (Mixtral), got " + v->arch);
  }
  if (v->experts <= 0 || v->experts_used > v->experts) {
    return absl::InvalidArgumentError("moe spec: needs experts >= used > 0");
  }
  if (v->arch == "llama") v->expert_ffn = 0;  // Mixtral's experts have the ffn rows
  return absl::OkStatus();
}

// WriteUnquantized: the f32 or f16 file of a synthetic:, moe: or gemma3: spec.
absl::Status WriteUnquantized(const std::string& spec, bool f16, const std::string& path) {
  if (IsRandomSpec(spec)) {
    testing::Variant v;
    testing::RandomShape shape;
    RETURN_IF_ERROR(ParseRandomSpec(spec, &v, &shape));
    testing::WriteRandomModel(v, f16, path, shape);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(SyntheticSpec s, ParseSyntheticSpec(spec));
  ASSIGN_OR_RETURN(ModelParts parts, MakeSyntheticParts(s));
  WriteParts(parts, f16, path);
  return absl::OkStatus();
}

}  // namespace

bool IsRandomSpec(const std::string& spec) {
  return spec.rfind("moe:", 0) == 0 || spec.rfind("gemma3:", 0) == 0;
}

absl::Status WriteSyntheticGguf(const std::string& spec, const std::string& encoding,
                                const std::string& lib_dir, const std::string& path) {
  // llama_ftype values of the pinned llama.h.
  static const std::map<std::string, int> kFtypes = {
      {"q4_0", 2}, {"q4_1", 3}, {"q8_0", 7}, {"q5_0", 8}, {"q5_1", 9}, {"q4_k_m", 15},
      {"q5_k_m", 17}, {"q6_k", 18}};
  if (encoding != "f32" && encoding != "f16" && !kFtypes.count(encoding)) {
    return absl::InvalidArgumentError("unknown --encoding " + encoding +
                                      " (f32, f16, q8_0, q4_0, q4_1, q5_0, q5_1, q4_k_m, q5_k_m, q6_k)");
  }
  if (encoding == "f32" || encoding == "f16") return WriteUnquantized(spec, encoding == "f16", path);
  const std::string f16 = path + ".f16";
  RETURN_IF_ERROR(WriteUnquantized(spec, true, f16));
  const absl::Status q = Quantize(lib_dir, f16, path, kFtypes.at(encoding));
  std::remove(f16.c_str());
  return q;
}

}  // namespace ragkv::model
