// No abseil includes in this file (see sp_wrapper.h).
#include "model/internal/sp_wrapper.h"

#include <sentencepiece_processor.h>

namespace ragkv::model::internal {

struct SpWrapper::Impl {
  sentencepiece::SentencePieceProcessor sp;
};

SpWrapper::SpWrapper() : impl_(new Impl) {}
SpWrapper::~SpWrapper() = default;

bool SpWrapper::Load(const std::string& path, std::string* error) {
  auto s = impl_->sp.Load(path);
  if (!s.ok()) *error = s.ToString();
  return s.ok();
}
bool SpWrapper::Encode(const std::string& text, std::vector<int>* ids, std::string* error) const {
  auto s = impl_->sp.Encode(text, ids);
  if (!s.ok()) *error = s.ToString();
  return s.ok();
}
bool SpWrapper::Decode(const std::vector<int>& ids, std::string* out, std::string* error) const {
  auto s = impl_->sp.Decode(ids, out);
  if (!s.ok()) *error = s.ToString();
  return s.ok();
}
std::string SpWrapper::IdToPiece(int id) const { return impl_->sp.IdToPiece(id); }
int SpWrapper::PieceSize() const { return impl_->sp.GetPieceSize(); }
int SpWrapper::bos_id() const { return impl_->sp.bos_id(); }
int SpWrapper::eos_id() const { return impl_->sp.eos_id(); }
bool SpWrapper::IsControl(int id) const { return impl_->sp.IsControl(id); }
bool SpWrapper::IsUnused(int id) const { return impl_->sp.IsUnused(id); }
bool SpWrapper::IsByte(int id) const { return impl_->sp.IsByte(id); }

}  // namespace ragkv::model::internal
