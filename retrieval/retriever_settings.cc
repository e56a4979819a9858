// retriever_settings.cc: Retriever::CheckSettings, the comparison of the
// settings a directory was built with against this opening's
// (RetrieverOptions::on_setting_change).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "retrieval/internal/meta_keys.h"
#include "retrieval/retriever.h"

namespace ragkv::retrieval {
namespace {

using internal::meta::kFormatVersion;
using internal::meta::kMetaChunker;
using internal::meta::kMetaEmbedder;
using internal::meta::kMetaFormat;
using internal::meta::kMetaGeneration;
using internal::meta::kMetaIndex;
using internal::meta::kMetaTokenizer;

// EmbedderVersionless: an embedder fingerprint without the "-v<N>" that
// ends any of its ':'-separated parts ("hashed-tfidf-v2:dim=512" ->
// "hashed-tfidf:dim=512"), so that two fingerprints differing only there are
// versions of one embedder.
std::string EmbedderVersionless(std::string_view fp) {
  std::string out;
  for (absl::string_view part : absl::StrSplit(absl::string_view(fp.data(), fp.size()), ':')) {
    const size_t v = part.rfind("-v");
    if (v != absl::string_view::npos && v + 2 < part.size() &&
        std::all_of(part.begin() + v + 2, part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      part = part.substr(0, v);
    }
    absl::StrAppend(&out, out.empty() ? "" : ":", part);
  }
  return out;
}

}  // namespace

absl::Status Retriever::CheckSettings(std::optional<std::string>* reembed_from, bool* rebuild_index) {
  using Change = RetrieverOptions::SettingChange;
  const Change policy = options_.on_setting_change;
  const std::vector<std::pair<std::string, std::string>> fingerprints = {
      {kMetaFormat, kFormatVersion},
      {kMetaTokenizer, options_.tokenizer->Fingerprint()},
      {kMetaEmbedder, options_.embedder->Fingerprint()},
      {kMetaChunker, absl::StrCat("target=", options_.chunker.target_tokens,
                                  ",overlap=", options_.chunker.overlap_tokens)},
      {kMetaIndex, absl::StrCat(options_.index.factory, ",metric=", static_cast<int>(options_.index.metric))},
  };
  CatalogueMutation init;
  std::string refused;  // every setting that differs and is not re-derived
  for (const auto& [key, value] : fingerprints) {
    ASSIGN_OR_RETURN(std::optional<std::string> stored, catalogue_->GetMeta(key));
    if (!stored) {
      init.put_meta.emplace_back(key, value);
      continue;
    }
    if (*stored == value) continue;
    const bool upgrade = EmbedderVersionless(*stored) == EmbedderVersionless(value);
    if (key == std::string(kMetaEmbedder) && options_.embedder->embeds_text() &&
        (policy == Change::kRebuild || (policy == Change::kUpgrade && upgrade))) {
      // The catalogue keeps every chunk's text: re-embed (Open), then record
      // the new embedder (a crash before that simply re-embeds again).
      *reembed_from = *stored;
    } else if (key == std::string(kMetaIndex) && policy == Change::kRebuild) {
      // The catalogue keeps every vector: a new generation makes Open rebuild
      // the index (the saved file, of the old factory, is not loaded).
      RAGKV_LOG(INFO) << "Retriever: " << options_.dir << ": index changed from '" << *stored
                      << "' to '" << value << "'; rebuilding it from the stored vectors";
      init.put_meta.emplace_back(key, value);
      *rebuild_index = true;
    } else {
      absl::StrAppend(&refused, refused.empty() ? "" : "; ", key, " '", *stored, "', now '", value, "'");
    }
  }
  if (!refused.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("Retriever: ", options_.dir, " was created with ", refused));
  }
  if (*rebuild_index) {
    ASSIGN_OR_RETURN(std::optional<std::string> g, catalogue_->GetMeta(kMetaGeneration));
    uint64_t gen = 0;
    if (g && !absl::SimpleAtoi(*g, &gen)) return absl::DataLossError("catalogue meta generation corrupt");
    init.put_meta.emplace_back(kMetaGeneration, absl::StrCat(gen + 1));
  }
  if (!init.put_meta.empty()) RETURN_IF_ERROR(catalogue_->Apply(init));
  return absl::OkStatus();
}

}  // namespace ragkv::retrieval
