// BpeTokenizer: Hugging Face tokenizer.json, byte-level BPE (GPT-2 style;
// also the Llama-3 / Qwen2 pre-tokenizer regex family).
//
// Pre-tokenization re-implements the regexes by hand over Unicode classes
// (letter / number / whitespace / other): \p{L} and \p{N} are the Unicode
// general categories (ICU's u_charType), \s the White_Space set. The same
// tokenizer serves GGUF `gpt2` vocabularies (MakeGgufBpeTokenizer), checked
// against llama.cpp's own test vectors (tests/llamacpp). docs/model.md.
#include <algorithm>
#include <fstream>
#include <functional>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>
#include <unicode/uchar.h>

#include "absl/strings/str_cat.h"
#include "model/internal/loaders.h"

namespace ragkv::model::internal {
namespace {

using nlohmann::json;

// ---- UTF-8 and Unicode classes ----
int DecodeUtf8(std::string_view s, size_t i, uint32_t* cp) {
  const unsigned char c = s[i];
  int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
  if (i + len > s.size()) len = 1;
  for (int k = 1; k < len; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) len = 1;
  }
  if (len == 1) {
    *cp = c;
  } else {
    uint32_t v = c & (0x7F >> len);
    for (int k = 1; k < len; ++k) v = (v << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    *cp = v;
  }
  return len;
}
void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

enum Cls { kLetter, kNumber, kSpace, kOther };
Cls Classify(uint32_t c) {
  if (c < 0x80) {
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') return kLetter;
    if (c >= '0' && c <= '9') return kNumber;
    if (c == ' ' || (c >= 9 && c <= 13)) return kSpace;
    return kOther;
  }
  // \s: the White_Space set the tokenizers' regexes (and llama.cpp) use.
  if (c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
      c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000) {
    return kSpace;
  }
  // \p{L} and \p{N}: Unicode general categories, from ICU.
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return kLetter;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      return kNumber;
    default:
      return kOther;
  }
}

// Pre-tokenizer regex families.
struct SplitStyle {
  bool llama3 = false;  // (?i:contractions)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,k}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  int max_digits = 0;   // 0 = unlimited (GPT-2: ?\p{N}+)
};

std::vector<std::string> PreTokenize(std::string_view text, const SplitStyle& st) {
  std::vector<uint32_t> cps;
  std::vector<size_t> off;
  for (size_t i = 0; i < text.size();) {
    uint32_t cp;
    off.push_back(i);
    i += DecodeUtf8(text, i, &cp);
    cps.push_back(cp);
  }
  off.push_back(text.size());
  const size_t n = cps.size();
  auto cls = [&](size_t i) { return Classify(cps[i]); };
  auto is_nl = [&](size_t i) { return cps[i] == '\r' || cps[i] == '\n'; };
  std::vector<std::string> out;
  auto emit = [&](size_t a, size_t b) { out.emplace_back(text.substr(off[a], off[b] - off[a])); };
  size_t i = 0;
  while (i < n) {
    // Contractions.
    if (cps[i] == '\'' && i + 1 < n) {
      auto lower = [&](size_t k) { return st.llama3 && cps[k] < 0x80 ? (cps[k] | 0x20) : cps[k]; };
      const uint32_t a = lower(i + 1), b = i + 2 < n ? lower(i + 2) : 0;
      if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) {
        emit(i, i + 3);
        i += 3;
        continue;
      }
      if (a == 's' || a == 't' || a == 'm' || a == 'd') {
        emit(i, i + 2);
        i += 2;
        continue;
      }
    }
    if (st.llama3) {
      // [^\r\n\p{L}\p{N}]?\p{L}+
      size_t j = i;
      if (cls(j) != kLetter && cls(j) != kNumber && !is_nl(j) && j + 1 < n && cls(j + 1) == kLetter) ++j;
      if (cls(j) == kLetter) {
        while (j < n && cls(j) == kLetter) ++j;
        emit(i, j);
        i = j;
        continue;
      }
      // \p{N}{1,k}
      if (cls(i) == kNumber) {
        size_t k = i;
        while (k < n && cls(k) == kNumber && (st.max_digits == 0 || int(k - i) < st.max_digits)) ++k;
        emit(i, k);
        i = k;
        continue;
      }
      //  ?[^\s\p{L}\p{N}]+[\r\n]*
      size_t p = i;
      if (cps[p] == ' ' && p + 1 < n && cls(p + 1) == kOther) ++p;
      if (cls(p) == kOther) {
        while (p < n && cls(p) == kOther) ++p;
        while (p < n && is_nl(p)) ++p;
        emit(i, p);
        i = p;
        continue;
      }
      // \s*[\r\n]+
      size_t s = i;
      while (s < n && cls(s) == kSpace) ++s;
      size_t last_nl = n;
      for (size_t k = i; k < s; ++k) if (is_nl(k)) last_nl = k;
      if (last_nl != n) {
        emit(i, last_nl + 1);
        i = last_nl + 1;
        continue;
      }
    } else {
      //  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+
      size_t j = i;
      if (cps[j] == ' ' && j + 1 < n && cls(j + 1) != kSpace) ++j;
      const Cls c = cls(j);
      if (c != kSpace) {
        size_t k = j;
        while (k < n && cls(k) == c) ++k;
        emit(i, k);
        i = k;
        continue;
      }
    }
    // \s+(?!\S) | \s+
    size_t k = i;
    while (k < n && cls(k) == kSpace) ++k;
    if (k < n && k - i > 1) --k;  // leave one space to prefix the next word
    emit(i, k);
    i = k;
  }
  return out;
}

class BpeTokenizer final : public Tokenizer {
 public:
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_bos,
                                              bool add_eos) const override {
    std::vector<int32_t> ids;
    if (add_bos && this->add_bos()) ids.push_back(bos_);
    std::string t(text);
    if (add_prefix_space_ && !t.empty() && t[0] != ' ') t.insert(t.begin(), ' ');
    // Split on added tokens (longest match first), BPE the rest.
    size_t start = 0, i = 0;
    while (i <= t.size()) {
      int32_t hit = -1;
      size_t hit_len = 0;
      if (i < t.size()) {
        for (const auto& [content, id] : added_sorted_) {
          if (t.compare(i, content.size(), content) == 0) {
            hit = id;
            hit_len = content.size();
            break;
          }
        }
      }
      if (hit >= 0 || i == t.size()) {
        if (i > start) {
          absl::Status s = EncodeText(std::string_view(t).substr(start, i - start), &ids);
          if (!s.ok()) return s;
        }
        if (hit < 0) break;
        ids.push_back(hit);
        i += hit_len;
        start = i;
      } else {
        ++i;
      }
    }
    if (add_eos && eos_ >= 0) ids.push_back(eos_);
    return ids;
  }

  std::string DecodePiece(int32_t, int32_t id) const override {
    if (id < 0 || id >= static_cast<int32_t>(id_to_token_.size())) return "";
    if (special_.count(id)) return "";
    if (added_ids_.count(id)) return id_to_token_[id];
    std::string out;
    const std::string& tok = id_to_token_[id];
    for (size_t i = 0; i < tok.size();) {
      uint32_t cp;
      i += DecodeUtf8(tok, i, &cp);
      auto it = unicode_to_byte_.find(cp);
      if (it != unicode_to_byte_.end()) out.push_back(static_cast<char>(it->second));
      else AppendUtf8(cp, &out);
    }
    return out;
  }

  int32_t vocab_size() const override { return static_cast<int32_t>(id_to_token_.size()); }
  int32_t bos_id() const override { return bos_; }
  bool add_bos() const override { return add_bos_ && bos_ >= 0; }
  int32_t eos_id() const override { return eos_; }
  bool IsControl(int32_t id) const override {
    return id < 0 || id >= vocab_size() || special_.count(id) > 0;
  }
  std::string Name() const override { return name_; }

  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(const json& j, const std::string& path);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromGguf(const GgufBpeVocab& v,
                                                             const std::string& path);

 private:
  absl::Status EncodeText(std::string_view text, std::vector<int32_t>* ids) const {
    for (const std::string& word : PreTokenize(text, style_)) {
      if (ignore_merges_) {
        // Llama-3: a word the vocabulary holds whole is that token.
        std::string mapped;
        for (unsigned char b : word) AppendUtf8(byte_to_unicode_[b], &mapped);
        auto it = vocab_.find(mapped);
        if (it != vocab_.end()) {
          ids->push_back(it->second);
          continue;
        }
      }
      std::vector<std::string> sym;
      for (unsigned char b : word) {
        std::string s;
        AppendUtf8(byte_to_unicode_[b], &s);
        sym.push_back(std::move(s));
      }
      while (sym.size() > 1) {
        int best = -1;
        size_t best_i = 0;
        for (size_t k = 0; k + 1 < sym.size(); ++k) {
          auto it = ranks_.find(sym[k] + " " + sym[k + 1]);
          if (it != ranks_.end() && (best < 0 || it->second < best)) {
            best = it->second;
            best_i = k;
          }
        }
        if (best < 0) break;
        const std::string a = sym[best_i], b = sym[best_i + 1];
        std::vector<std::string> next;
        for (size_t k = 0; k < sym.size(); ++k) {
          if (k + 1 < sym.size() && sym[k] == a && sym[k + 1] == b) {
            next.push_back(a + b);
            ++k;
          } else {
            next.push_back(sym[k]);
          }
        }
        sym.swap(next);
      }
      for (const std::string& s : sym) {
        auto it = vocab_.find(s);
        if (it != vocab_.end()) {
          ids->push_back(it->second);
        } else if (unk_ >= 0) {
          ids->push_back(unk_);
        } else {
          return absl::InternalError(absl::StrCat("tokenizer.json: no token for '", s, "'"));
        }
      }
    }
    return absl::OkStatus();
  }

  std::unordered_map<std::string, int32_t> vocab_;
  std::vector<std::string> id_to_token_;
  std::unordered_map<std::string, int> ranks_;
  std::vector<std::pair<std::string, int32_t>> added_sorted_;
  std::unordered_map<int32_t, bool> special_, added_ids_;
  uint32_t byte_to_unicode_[256];
  std::unordered_map<uint32_t, uint8_t> unicode_to_byte_;
  SplitStyle style_;
  bool add_prefix_space_ = false;
  bool ignore_merges_ = false;  // tokenizer.json model.ignore_merges; GGUF llama-bpe
  int32_t bos_ = -1, eos_ = -1, unk_ = -1;
  bool add_bos_ = false;  // GGUF: DecideSpecialTokens; tokenizer.json: a BOS was found
  std::string name_ = "hf-bpe";

  // InitByteMap: GPT-2's bytes_to_unicode.
  void InitByteMap() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool direct = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      byte_to_unicode_[b] = direct ? b : 256 + n++;
      unicode_to_byte_[byte_to_unicode_[b]] = static_cast<uint8_t>(b);
    }
  }
};

absl::StatusOr<std::unique_ptr<Tokenizer>> BpeTokenizer::FromGguf(const GgufBpeVocab& v,
                                                                  const std::string& path) {
  auto t = std::make_unique<BpeTokenizer>();
  t->name_ = "gguf-bpe:" + v.pre;
  if (v.pre == "llama-bpe" || v.pre == "llama3" || v.pre == "llama-v3") {
    t->style_ = {true, 3};
    t->ignore_merges_ = true;  // as llama.cpp does for this pre-tokenizer
  } else if (v.pre == "qwen2") {
    t->style_ = {true, 1};
  } else if (v.pre == "gpt-2") {
    t->style_ = {false, 0};
  } else {
    return absl::UnimplementedError(absl::StrCat(
        path, ": tokenizer.ggml.pre '", v.pre,
        "' is not supported (llama-bpe / llama3, qwen2, gpt-2 are)"));
  }
  t->id_to_token_ = v.tokens;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const int32_t id = static_cast<int32_t>(i);
    t->vocab_.emplace(v.tokens[i], id);
    const int32_t type = i < v.types.size() ? v.types[i] : 1;
    if (type == 3) t->special_[id] = true;  // control: never matched in text
    if (type == 4) {                        // user-defined: matched as a whole
      t->added_sorted_.emplace_back(v.tokens[i], id);
      t->added_ids_[id] = true;
    }
  }
  std::sort(t->added_sorted_.begin(), t->added_sorted_.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  for (size_t r = 0; r < v.merges.size(); ++r) t->ranks_.emplace(v.merges[r], static_cast<int>(r));
  t->bos_ = v.bos;
  t->add_bos_ = v.add_bos;
  t->eos_ = v.eos;
  t->unk_ = v.unk;
  t->InitByteMap();
  return std::unique_ptr<Tokenizer>(std::move(t));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> BpeTokenizer::FromJson(const json& j,
                                                                  const std::string& path) {
  auto bad = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
  };
  if (!j.is_object() || !j.contains("model") || !j["model"].is_object()) return bad("no \"model\"");
  const json& m = j["model"];
  if (!m.contains("type") || m["type"] != "BPE") {
    return absl::UnimplementedError(absl::StrCat(path, ": only BPE models are supported"));
  }
  if (!m.contains("vocab") || !m["vocab"].is_object()) return bad("model.vocab missing");
  auto t = std::make_unique<BpeTokenizer>();
  int32_t max_id = -1;
  for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
        it.value().get<int64_t>() > (1 << 24)) {
      return bad("model.vocab has a bad id");
    }
    const int32_t id = it.value().get<int32_t>();
    t->vocab_[it.key()] = id;
    max_id = std::max(max_id, id);
  }
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const json& a : j["added_tokens"]) {
      if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
          !a.contains("content") || !a["content"].is_string()) {
        return bad("malformed added_tokens entry");
      }
      const int32_t id = a["id"].get<int32_t>();
      if (id < 0 || id > (1 << 24)) return bad("added token id out of range");
      max_id = std::max(max_id, id);
      const std::string content = a["content"].get<std::string>();
      t->added_sorted_.emplace_back(content, id);
      t->added_ids_[id] = true;
      if (a.value("special", false)) t->special_[id] = true;
    }
  }
  std::sort(t->added_sorted_.begin(), t->added_sorted_.end(),
            [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  t->id_to_token_.assign(max_id + 1, "");
  for (const auto& [s, id] : t->vocab_) t->id_to_token_[id] = s;
  for (const auto& [s, id] : t->added_sorted_) t->id_to_token_[id] = s;
  if (m.contains("merges") && m["merges"].is_array()) {
    int rank = 0;
    for (const json& e : m["merges"]) {
      if (e.is_string()) {
        t->ranks_.emplace(e.get<std::string>(), rank++);
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        t->ranks_.emplace(e[0].get<std::string>() + " " + e[1].get<std::string>(), rank++);
      } else {
        return bad("malformed merges entry");
      }
    }
  }
  t->ignore_merges_ = m.contains("ignore_merges") && m["ignore_merges"].is_boolean() &&
                     m["ignore_merges"].get<bool>();
  if (m.contains("unk_token") && m["unk_token"].is_string()) {
    auto it = t->vocab_.find(m["unk_token"].get<std::string>());
    if (it != t->vocab_.end()) t->unk_ = it->second;
  }
  t->InitByteMap();
  // Pre-tokenizer: ByteLevel (GPT-2 regex) or Sequence[Split(regex), ByteLevel].
  std::function<absl::Status(const json&)> scan = [&](const json& p) -> absl::Status {
    if (!p.is_object()) return absl::OkStatus();
    const std::string type = p.value("type", "");
    if (type == "Sequence" && p.contains("pretokenizers") && p["pretokenizers"].is_array()) {
      for (const json& q : p["pretokenizers"]) {
        absl::Status s = scan(q);
        if (!s.ok()) return s;
      }
    } else if (type == "ByteLevel") {
      t->add_prefix_space_ = p.value("add_prefix_space", false);
    } else if (type == "Split") {
      std::string re;
      if (p.contains("pattern") && p["pattern"].is_object() && p["pattern"].contains("Regex") &&
          p["pattern"]["Regex"].is_string()) {
        re = p["pattern"]["Regex"].get<std::string>();
      }
      if (re.find("[^\\r\\n\\p{L}\\p{N}]?\\p{L}+") != std::string::npos) {
        t->style_.llama3 = true;
        t->style_.max_digits = re.find("\\p{N}{1,3}") != std::string::npos ? 3 : 1;
      } else if (re.find("?\\p{L}+") == std::string::npos) {
        return absl::UnimplementedError(absl::StrCat(path, ": unsupported pre-tokenizer regex ", re));
      }
    } else if (!type.empty() && type != "Digits") {
      return absl::UnimplementedError(absl::StrCat(path, ": unsupported pre-tokenizer ", type));
    }
    return absl::OkStatus();
  };
  if (j.contains("pre_tokenizer")) {
    absl::Status s = scan(j["pre_tokenizer"]);
    if (!s.ok()) return s;
  }
  // BOS/EOS: the post-processor template's leading special token, else by name.
  auto find_added = [&](std::initializer_list<const char*> names) -> int32_t {
    for (const char* nm : names) {
      for (const auto& [s, id] : t->added_sorted_) {
        if (s == nm) return id;
      }
    }
    return -1;
  };
  t->bos_ = find_added({"<|begin_of_text|>", "<s>", "<|startoftext|>"});
  t->add_bos_ = t->bos_ >= 0;
  t->eos_ = find_added({"<|end_of_text|>", "</s>", "<|endoftext|>", "<|im_end|>"});
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadHfBpeTokenizer(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": invalid JSON"));
  // The one place nlohmann exceptions (type errors) are translated.
  try {
    return BpeTokenizer::FromJson(j, path);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": malformed tokenizer.json: ", e.what()));
  }
}

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeGgufBpeTokenizer(const GgufBpeVocab& v,
                                                                const std::string& path) {
  return BpeTokenizer::FromGguf(v, path);
}

// Exposed for tests through the loader only; PreTokenize stays private.

}  // namespace ragkv::model::internal
