#include "blend/plan_gguf.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace ragkv::blend {
namespace {

constexpr uint64_t kMaxString = uint64_t{1} << 24;
constexpr uint64_t kMaxCount = uint64_t{1} << 32;

// Header: what the planner needs of a GGUF header.
struct Header {
  std::map<std::string, double> numbers;
  std::map<std::string, std::string> strings;
  std::map<std::string, uint64_t> array_lengths;
  struct Tensor {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t type = 0;
  };
  std::vector<Tensor> tensors;
};

class Reader {
 public:
  Reader(std::ifstream* f, std::string path) : f_(f), path_(std::move(path)) {}

  template <typename T>
  absl::StatusOr<T> Pod() {
    T v{};
    if (!f_->read(reinterpret_cast<char*>(&v), sizeof(T))) return Truncated();
    return v;
  }
  absl::StatusOr<std::string> Str() {
    absl::StatusOr<uint64_t> n = Pod<uint64_t>();
    if (!n.ok()) return n.status();
    if (*n > kMaxString) return Bad(absl::StrCat("a string of ", *n, " bytes"));
    std::string s(*n, '\0');
    if (!f_->read(s.data(), static_cast<std::streamsize>(*n))) return Truncated();
    return s;
  }
  // Value: a scalar of GGUF type `type` as a number (false for strings).
  absl::Status Value(uint32_t type, const std::string& key, Header* h);
  absl::Status Skip(uint64_t bytes) {
    f_->seekg(static_cast<std::streamoff>(bytes), std::ios::cur);
    return *f_ ? absl::OkStatus() : Truncated();
  }
  absl::Status Truncated() const { return Bad("a header truncated"); }
  absl::Status Bad(const std::string& what) const {
    return absl::InvalidArgumentError(absl::StrCat("gguf header of ", path_, ": ", what));
  }

 private:
  std::ifstream* f_;
  std::string path_;
};

// ScalarSize: bytes of a fixed-size GGUF scalar type (0: string / array / unknown).
int ScalarSize(uint32_t type) {
  static const int sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
  return type < 13 ? sizes[type] : 0;
}

template <typename T>
absl::StatusOr<double> Num(Reader* r) {
  absl::StatusOr<T> v = r->Pod<T>();
  if (!v.ok()) return v.status();
  return static_cast<double>(*v);
}

absl::StatusOr<double> Number(Reader* r, uint32_t type) {
  switch (type) {
    case 0:
      return Num<uint8_t>(r);
    case 1:
      return Num<int8_t>(r);
    case 2:
      return Num<uint16_t>(r);
    case 3:
      return Num<int16_t>(r);
    case 4:
      return Num<uint32_t>(r);
    case 5:
      return Num<int32_t>(r);
    case 6:
      return Num<float>(r);
    case 7:
      return Num<uint8_t>(r);
    case 10:
      return Num<uint64_t>(r);
    case 11:
      return Num<int64_t>(r);
    case 12:
      return Num<double>(r);
    default:
      break;
  }
  return r->Bad(absl::StrCat("value type ", type));
}

absl::Status Reader::Value(uint32_t type, const std::string& key, Header* h) {
  if (type == 8) {
    absl::StatusOr<std::string> s = Str();
    if (!s.ok()) return s.status();
    h->strings[key] = *s;
    return absl::OkStatus();
  }
  if (type != 9) {
    absl::StatusOr<double> v = Number(this, type);
    if (!v.ok()) return v.status();
    h->numbers[key] = *v;
    return absl::OkStatus();
  }
  absl::StatusOr<uint32_t> elem = Pod<uint32_t>();
  absl::StatusOr<uint64_t> n = elem.ok() ? Pod<uint64_t>() : elem.status();
  if (!n.ok()) return n.status();
  if (*n > kMaxCount) return Bad(absl::StrCat("an array of ", *n, " values"));
  h->array_lengths[key] = *n;
  if (*elem != 8) {
    if (ScalarSize(*elem) == 0) return Bad(absl::StrCat("array element type ", *elem));
    return Skip(*n * ScalarSize(*elem));
  }
  for (uint64_t i = 0; i < *n; ++i) {
    absl::StatusOr<uint64_t> len = Pod<uint64_t>();
    if (!len.ok()) return len.status();
    if (*len > kMaxString) return Bad("an array string too long");
    if (absl::Status s = Skip(*len); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ReadTensorInfo(Reader* r, Header* h) {
  Header::Tensor t;
  absl::StatusOr<std::string> name = r->Str();
  absl::StatusOr<uint32_t> n = name.ok() ? r->Pod<uint32_t>() : name.status();
  if (!n.ok()) return n.status();
  if (*n > 8) return r->Bad(absl::StrCat("tensor ", *name, " with ", *n, " dims"));
  t.name = *name;
  for (uint32_t i = 0; i < *n; ++i) {
    absl::StatusOr<uint64_t> d = r->Pod<uint64_t>();
    if (!d.ok()) return d.status();
    t.dims.push_back(*d);
  }
  absl::StatusOr<uint32_t> type = r->Pod<uint32_t>();
  absl::StatusOr<uint64_t> offset = type.ok() ? r->Pod<uint64_t>() : type.status();
  if (!offset.ok()) return offset.status();
  t.type = *type;
  h->tensors.push_back(std::move(t));
  return absl::OkStatus();
}

absl::StatusOr<Header> ReadHeader(const std::string& path) {
  if (!std::filesystem::exists(path))
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  std::ifstream f(path, std::ios::binary);
  Reader r(&f, path);
  absl::StatusOr<uint32_t> magic = r.Pod<uint32_t>();
  absl::StatusOr<uint32_t> version = magic.ok() ? r.Pod<uint32_t>() : magic.status();
  if (!version.ok()) return version.status();
  if (*magic != 0x46554747u) return r.Bad("not a GGUF file (magic)");
  if (*version != 2 && *version != 3) return r.Bad(absl::StrCat("version ", *version));
  absl::StatusOr<uint64_t> n_tensors = r.Pod<uint64_t>();
  absl::StatusOr<uint64_t> n_kv = n_tensors.ok() ? r.Pod<uint64_t>() : n_tensors.status();
  if (!n_kv.ok()) return n_kv.status();
  if (*n_tensors > kMaxCount || *n_kv > kMaxCount) return r.Bad("implausible counts");
  Header h;
  for (uint64_t i = 0; i < *n_kv; ++i) {
    absl::StatusOr<std::string> key = r.Str();
    absl::StatusOr<uint32_t> type = key.ok() ? r.Pod<uint32_t>() : key.status();
    if (!type.ok()) return type.status();
    if (absl::Status s = r.Value(*type, *key, &h); !s.ok()) return s;
  }
  for (uint64_t i = 0; i < *n_tensors; ++i) {
    if (absl::Status s = ReadTensorInfo(&r, &h); !s.ok()) return s;
  }
  return h;
}

// TypeBytes: bytes per element of a ggml tensor type (0: unknown).
double TypeBytes(uint32_t type) {
  static const std::map<uint32_t, double> bytes = {{0, 4},
                                                   {1, 2},
                                                   {2, 18.0 / 32},
                                                   {3, 20.0 / 32},
                                                   {6, 22.0 / 32},
                                                   {7, 24.0 / 32},
                                                   {8, 34.0 / 32},
                                                   {10, 84.0 / 256},
                                                   {11, 110.0 / 256},
                                                   {12, 144.0 / 256},
                                                   {13, 176.0 / 256},
                                                   {14, 210.0 / 256},
                                                   {15, 292.0 / 256},
                                                   {30, 2},
                                                   {39, 17.0 / 32}};
  auto it = bytes.find(type);
  return it == bytes.end() ? 0 : it->second;
}

// MeanBytes: element-weighted bytes per weight of the 2-D+ tensors whose
// name does (experts) or does not contain "_exps"; `def` when none.
double MeanBytes(const Header& h, bool experts, double def) {
  double elems = 0, bytes = 0;
  for (const Header::Tensor& t : h.tensors) {
    if (t.dims.size() < 2 || absl::StrContains(t.name, "_exps") != experts) continue;
    double n = 1;
    for (uint64_t d : t.dims) n *= static_cast<double>(d);
    if (TypeBytes(t.type) <= 0) continue;
    elems += n;
    bytes += n * TypeBytes(t.type);
  }
  return elems > 0 ? bytes / elems : def;
}

class Keys {
 public:
  Keys(const Header& h, std::string arch) : h_(h), arch_(std::move(arch)) {}
  int Get(const std::string& key, int def) const {
    auto it = h_.numbers.find(arch_ + "." + key);
    return it == h_.numbers.end() ? def : static_cast<int>(it->second);
  }
  bool Has(const std::string& key) const { return h_.numbers.count(arch_ + "." + key) > 0; }

 private:
  const Header& h_;
  std::string arch_;
};

int Vocab(const Header& h, const Keys& k) {
  if (k.Has("vocab_size")) return k.Get("vocab_size", 0);
  for (const Header::Tensor& t : h.tensors) {
    if (t.name == "token_embd.weight" && t.dims.size() == 2) return static_cast<int>(t.dims[1]);
  }
  auto it = h.array_lengths.find("tokenizer.ggml.tokens");
  return it == h.array_lengths.end() ? 0 : static_cast<int>(it->second);
}

void Experts(const Keys& k, ModelArch* a) {
  a->experts = k.Get("expert_count", 0);
  if (a->experts == 0) return;
  a->experts_active = k.Get("expert_used_count", 0);
  a->expert_ffn = k.Get("expert_feed_forward_length", a->ffn);
  a->shared_experts = k.Get("expert_shared_count", 0);
  a->shared_expert_ffn =
      a->shared_experts > 0 ? k.Get("expert_shared_feed_forward_length", a->expert_ffn) : 0;
  a->first_dense_layers = k.Get("leading_dense_block_count", 0);
}

void Attention(const std::string& arch, const Keys& k, ModelArch* a) {
  if (k.Has("attention.kv_lora_rank")) {
    a->q_lora_rank = k.Get("attention.q_lora_rank", 0);
    a->kv_lora_rank = k.Get("attention.kv_lora_rank", 0);
    // Files converted for absorbed MLA give the latent sizes as key/value
    // lengths and the per-head ones as *_mla.
    a->head_dim = k.Get("attention.key_length_mla", a->head_dim);
    a->qk_rope_dim = k.Get("rope.dimension_count", 64);
    a->qk_nope_dim = a->head_dim - a->qk_rope_dim;
    a->v_head_dim =
        k.Get("attention.value_length_mla", k.Get("attention.value_length", a->head_dim));
    a->kv_heads = a->heads;
  }
  a->sliding_window = k.Get("attention.sliding_window", 0);
  if (a->sliding_window > 0) a->global_every = arch == "gemma3" ? 6 : arch == "gpt-oss" ? 2 : 0;
  a->full_attention_every = k.Get("full_attention_interval", 0);
  if (a->full_attention_every > 0) {
    a->attn_output_gate = arch == "qwen3next";
    a->linear_k_heads = k.Get("ssm.group_count", 0);
    a->linear_v_heads = k.Get("ssm.time_step_rank", 0);
    a->linear_k_dim = k.Get("ssm.state_size", 0);
    a->linear_v_dim = a->linear_v_heads > 0 ? k.Get("ssm.inner_size", 0) / a->linear_v_heads : 0;
  }
}

}  // namespace

absl::StatusOr<ModelArch> ArchFromGgufHeader(const std::string& path) {
  absl::StatusOr<Header> h = ReadHeader(path);
  if (!h.ok()) return h.status();
  auto arch_it = h->strings.find("general.architecture");
  if (arch_it == h->strings.end()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": no general.architecture"));
  }
  const std::string arch = arch_it->second;
  const Keys k(*h, arch);
  for (const char* key : {"block_count", "embedding_length", "attention.head_count"}) {
    if (!k.Has(key)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": no ", arch, ".", key));
    }
  }
  ModelArch a;
  a.name = path;
  a.source = absl::StrCat("GGUF header (", arch, ")");
  a.layers = k.Get("block_count", 0);
  a.dim = k.Get("embedding_length", 0);
  a.heads = k.Get("attention.head_count", 0);
  a.kv_heads = k.Get("attention.head_count_kv", a.heads);
  a.head_dim = k.Get("attention.key_length", a.heads > 0 ? a.dim / a.heads : 0);
  a.ffn = k.Get("feed_forward_length", 0);
  a.vocab = Vocab(*h, k);
  Experts(k, &a);
  Attention(arch, k, &a);
  a.weight_bytes = MeanBytes(*h, false, 2);
  a.expert_weight_bytes = MeanBytes(*h, true, a.weight_bytes);
  return a;
}

}  // namespace ragkv::blend
