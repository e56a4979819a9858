// LlamaTokenizer (llama.cpp's SentencePiece-style encoder over a "llama" vocabulary),
// ByteTokenizer, and the default Tokenizer::Decode.
#include <array>
#include <queue>
#include <cstdio>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "model/tokenizer.h"

namespace ragkv::model {

std::string Tokenizer::Decode(absl::Span<const int32_t> ids) const {
  std::string out;
  int32_t prev = bos_id();
  for (int32_t id : ids) {
    if (IsControl(id)) {
      prev = id;
      continue;
    }
    out += DecodePiece(prev, id);
    prev = id;
  }
  return out;
}

namespace {

// ParseBytePiece: "<0xAB>" -> 0xAB, else -1.
int ParseBytePiece(const std::string& p) {
  if (p.size() != 6 || p[0] != '<' || p[1] != '0' || p[2] != 'x' || p[5] != '>') return -1;
  unsigned v = 0;
  for (int i = 3; i < 5; ++i) {
    char c = p[i];
    v <<= 4;
    if (c >= '0' && c <= '9') v |= c - '0';
    else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
    else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
    else return -1;
  }
  return static_cast<int>(v);
}

class LlamaTokenizer final : public Tokenizer {
 public:
  explicit LlamaTokenizer(LlamaVocab v) : v_(std::move(v)) {
    const int32_t n = static_cast<int32_t>(v_.pieces.size());
    byte_id_.fill(-1);
    control_.assign(n, false);
    byte_of_.assign(n, -1);
    for (int32_t i = 0; i < n; ++i) {
      const int type = v_.types.empty() ? 1 : v_.types[i];
      const int b = ParseBytePiece(v_.pieces[i]);
      if (b >= 0 && (type == 6 || v_.types.empty())) {
        if (byte_id_[b] < 0) byte_id_[b] = i;
        byte_of_[i] = b;
        continue;
      }
      if (i == v_.bos_id || i == v_.eos_id || i == v_.unk_id || type == 2 || type == 3 ||
          type == 5) {
        control_[i] = true;
        continue;
      }
      lookup_.emplace(v_.pieces[i], i);  // first id wins on duplicates
    }
    space_prefix_ = v_.add_space_prefix.value_or(lookup_.count(" ") > 0);
  }

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_bos,
                                              bool add_eos) const override {
    std::vector<int32_t> t;
    t.reserve(text.size() + 3);
    if (add_bos && this->add_bos()) t.push_back(v_.bos_id);
    if (!text.empty()) RETURN_IF_ERROR(EncodeText(text, &t));
    if (add_eos && v_.eos_id >= 0) t.push_back(v_.eos_id);
    return t;
  }

  std::string DecodePiece(int32_t prev, int32_t id) const override {
    if (id < 0 || id >= vocab_size() || control_[id]) return "";
    if (byte_of_[id] >= 0) return std::string(1, static_cast<char>(byte_of_[id]));
    const std::string& p = v_.pieces[id];
    if (prev == v_.bos_id && !p.empty() && p[0] == ' ') return p.substr(1);
    return p;
  }

  int32_t vocab_size() const override { return static_cast<int32_t>(v_.pieces.size()); }
  int32_t bos_id() const override { return v_.bos_id; }
  bool add_bos() const override { return v_.add_bos && v_.bos_id >= 0; }
  int32_t eos_id() const override { return v_.eos_id; }
  bool IsControl(int32_t id) const override {
    return id < 0 || id >= vocab_size() || control_[id];
  }
  std::string Name() const override { return "llama2c"; }

 private:
  // Sym: one symbol of the text being merged: bytes [begin, begin + len)
  // of the escaped text, in a linked list.
  struct Sym {
    uint32_t begin, len;
    int prev, next;
  };

  // EncodeText: llama.cpp's SentencePiece encoding (llm_tokenizer_spm).
  // Spaces, and literal U+2581 (which its escaping makes the same), are the
  // space piece (' ' here), with the dummy-prefix space first when the
  // vocabulary asks for it. The text starts as code points; the adjacent
  // pair whose concatenation is the highest-scoring piece merges first
  // (leftmost on ties), whether or not its halves are pieces themselves.
  // A final symbol is its piece, or else its bytes' tokens (a lone space:
  // U+2581's three bytes, as llama.cpp falls back).
  absl::Status EncodeText(std::string_view text, std::vector<int32_t>* out) const {
    std::string s;
    s.reserve(text.size() + 1);
    if (space_prefix_) s.push_back(' ');
    for (size_t i = 0; i < text.size();) {
      if (text.compare(i, 3, "\xE2\x96\x81") == 0) {
        s.push_back(' ');
        i += 3;
      } else {
        s.push_back(text[i++]);
      }
    }
    std::vector<Sym> sym;
    for (size_t i = 0; i < s.size();) {
      uint32_t len = 1;
      while (len < 4 && i + len < s.size() && (static_cast<unsigned char>(s[i + len]) & 0xC0) == 0x80) {
        ++len;
      }
      const int k = static_cast<int>(sym.size());
      sym.push_back({static_cast<uint32_t>(i), len, k - 1, -1});
      if (k > 0) sym[k - 1].next = k;
      i += len;
    }
    MergeAll(s, &sym);
    for (int i = 0; i >= 0; i = sym[i].next) {
      const std::string piece = s.substr(sym[i].begin, sym[i].len);
      if (auto it = lookup_.find(piece); it != lookup_.end()) {
        out->push_back(it->second);
        continue;
      }
      for (unsigned char b : piece == " " ? std::string("\xE2\x96\x81") : piece) {
        const int32_t id = byte_id_[b] >= 0 ? byte_id_[b] : static_cast<int32_t>(b) + 3;
        if (id >= static_cast<int32_t>(v_.pieces.size())) {
          return absl::InternalError(absl::StrFormat("tokenizer: no token for byte 0x%02X", b));
        }
        out->push_back(id);
      }
    }
    return absl::OkStatus();
  }

  // MergeAll: the greedy merges over a heap of candidate pairs, invalidated
  // lazily (O(n log n)).
  void MergeAll(const std::string& s, std::vector<Sym>* syms) const {
    std::vector<Sym>& sym = *syms;
    struct Cand {
      float score;
      int left, right;
      uint32_t left_len, right_len;
      int32_t merged;
    };
    auto worse = [](const Cand& a, const Cand& b) {
      return a.score < b.score || (a.score == b.score && a.left > b.left);
    };
    std::priority_queue<Cand, std::vector<Cand>, decltype(worse)> heap(worse);
    auto push = [&](int l) {
      if (l < 0 || sym[l].next < 0) return;
      const int r = sym[l].next;
      auto it = lookup_.find(s.substr(sym[l].begin, sym[l].len + sym[r].len));
      if (it == lookup_.end()) return;
      heap.push({v_.scores[it->second], l, r, sym[l].len, sym[r].len, it->second});
    };
    for (int i = 0; i + 1 < static_cast<int>(sym.size()); ++i) push(i);
    std::vector<bool> dead(sym.size(), false);
    while (!heap.empty()) {
      const Cand c = heap.top();
      heap.pop();
      if (dead[c.left] || dead[c.right] || sym[c.left].next != c.right ||
          sym[c.left].len != c.left_len || sym[c.right].len != c.right_len) {
        continue;  // stale
      }
      sym[c.left].len += sym[c.right].len;
      dead[c.right] = true;
      sym[c.left].next = sym[c.right].next;
      if (sym[c.right].next >= 0) sym[sym[c.right].next].prev = c.left;
      push(sym[c.left].prev);
      push(c.left);
    }
  }

  LlamaVocab v_;
  std::unordered_map<std::string, int32_t> lookup_;
  std::array<int32_t, 256> byte_id_;
  std::vector<bool> control_;
  std::vector<int> byte_of_;
  bool space_prefix_ = false;
};

class ByteTokenizer final : public Tokenizer {
 public:
  explicit ByteTokenizer(int32_t vocab) : vocab_(vocab) {}
  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_bos,
                                              bool add_eos) const override {
    std::vector<int32_t> t;
    if (add_bos) t.push_back(1);
    for (unsigned char c : text) t.push_back(3 + c);
    if (add_eos) t.push_back(2);
    return t;
  }
  std::string DecodePiece(int32_t, int32_t id) const override {
    if (id < 3 || id >= 259) return "";
    return std::string(1, static_cast<char>(id - 3));
  }
  int32_t vocab_size() const override { return vocab_; }
  int32_t bos_id() const override { return 1; }
  bool add_bos() const override { return true; }
  int32_t eos_id() const override { return 2; }
  bool IsControl(int32_t id) const override { return id < 3 || id >= 259; }
  std::string Name() const override { return "byte"; }

 private:
  int32_t vocab_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeLlamaTokenizer(LlamaVocab vocab) {
  if (vocab.pieces.empty()) return absl::InvalidArgumentError("tokenizer: empty vocabulary");
  if (vocab.scores.size() != vocab.pieces.size()) {
    return absl::InvalidArgumentError(absl::StrCat("tokenizer: ", vocab.scores.size(),
                                                   " scores for ", vocab.pieces.size(), " pieces"));
  }
  if (!vocab.types.empty() && vocab.types.size() != vocab.pieces.size()) {
    return absl::InvalidArgumentError("tokenizer: token types and pieces differ in size");
  }
  return std::unique_ptr<Tokenizer>(new LlamaTokenizer(std::move(vocab)));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> MakeByteTokenizer(int32_t vocab_size) {
  if (vocab_size < 259) {
    return absl::InvalidArgumentError(absl::StrCat(
        "byte tokenizer needs a vocabulary of at least 259 ids, model has ", vocab_size));
  }
  return std::unique_ptr<Tokenizer>(new ByteTokenizer(vocab_size));
}

}  // namespace ragkv::model
