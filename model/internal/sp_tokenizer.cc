// SentencePieceTokenizer: tokenizer.model through Debian's libsentencepiece
// (via SpWrapper). sentencepiece reports errors as util::Status (no
// exceptions); they are translated here.
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "model/internal/loaders.h"
#include "model/internal/sp_wrapper.h"

namespace ragkv::model::internal {
namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(std::unique_ptr<SpWrapper> sp) : sp_(std::move(sp)) {}

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_bos,
                                              bool add_eos) const override {
    std::vector<int> ids;
    std::string err;
    if (!sp_->Encode(std::string(text), &ids, &err)) {
      return absl::InternalError(absl::StrCat("sentencepiece: ", err));
    }
    std::vector<int32_t> out;
    out.reserve(ids.size() + 2);
    if (add_bos && this->add_bos()) out.push_back(sp_->bos_id());
    out.insert(out.end(), ids.begin(), ids.end());
    if (add_eos && sp_->eos_id() >= 0) out.push_back(sp_->eos_id());
    return out;
  }

  std::string Decode(absl::Span<const int32_t> ids) const override {
    std::vector<int> keep;
    keep.reserve(ids.size());
    for (int32_t id : ids) {
      if (!IsControl(id)) keep.push_back(id);
    }
    std::string out, err;
    if (!sp_->Decode(keep, &out, &err)) return "";
    return out;
  }

  std::string DecodePiece(int32_t prev, int32_t id) const override {
    if (IsControl(id)) return "";
    const std::string piece = sp_->IdToPiece(id);
    if (sp_->IsByte(id) && piece.size() == 6) {
      return std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
    }
    std::string p = absl::StrReplaceAll(piece, {{"\xE2\x96\x81", " "}});
    if (prev == bos_id() && !p.empty() && p[0] == ' ') p.erase(0, 1);
    return p;
  }

  int32_t vocab_size() const override { return sp_->PieceSize(); }
  int32_t bos_id() const override { return sp_->bos_id(); }
  // SentencePiece vocabularies start prompts with BOS (llama.cpp's SPM rule).
  bool add_bos() const override { return sp_->bos_id() >= 0; }
  int32_t eos_id() const override { return sp_->eos_id(); }
  bool IsControl(int32_t id) const override {
    return id < 0 || id >= vocab_size() || sp_->IsControl(id) || sp_->IsUnused(id);
  }
  std::string Name() const override { return "sentencepiece"; }

 private:
  std::unique_ptr<SpWrapper> sp_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePiece(const std::string& path) {
  auto sp = std::make_unique<SpWrapper>();
  std::string err;
  if (!sp->Load(path, &err)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a loadable SentencePiece model: ", err));
  }
  return std::unique_ptr<Tokenizer>(new SentencePieceTokenizer(std::move(sp)));
}

}  // namespace ragkv::model::internal
