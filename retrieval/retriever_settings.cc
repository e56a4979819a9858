// retriever_settings.cc: Retriever::CheckSettings, the comparison of the
// settings a directory was built with against this opening's
// (RetrieverOptions::on_setting_change).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/cord.h"
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
using internal::meta::kMetaReembedTarget;
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

absl::Status Retriever::CheckSettings(SettingsPlan* plan) {
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
  ASSIGN_OR_RETURN(std::optional<std::string> target, catalogue_->GetMeta(kMetaReembedTarget));
  if (target && target->empty()) target.reset();
  CatalogueMutation init;
  std::string refused;  // every setting that differs and is not re-derived
  bool unfinished_reembed = false;
  auto refuse = [&](const std::string& what) { absl::StrAppend(&refused, refused.empty() ? "" : "; ", what); };
  for (const auto& [key, value] : fingerprints) {
    ASSIGN_OR_RETURN(std::optional<std::string> stored, catalogue_->GetMeta(key));
    if (!stored) {
      init.put_meta.emplace_back(key, value);
      continue;
    }
    const bool embedder = key == std::string(kMetaEmbedder);
    if (embedder && target) {
      // An interrupted re-embed: the vectors are partly `target`'s. Resume
      // it with that embedder, redo it when asked, refuse anything else.
      if (options_.embedder->embeds_text() && (*target == value || policy == Change::kRebuild)) {
        RAGKV_LOG(WARNING) << "Retriever: " << options_.dir << ": "
                           << (*target == value ? "finishing" : "redoing")
                           << " an interrupted re-embed to '" << *target << "'";
        plan->reembed_from = *stored;
        plan->settle.emplace_back(key, value);
      } else {
        unfinished_reembed = true;
        refuse(absl::StrCat(key, " '", *stored, "' and an unfinished re-embed to '", *target,
                            "' (its vectors are mixed), now '", value, "': open it with '", *target,
                            "' to finish the re-embed, or rebuild it"));
      }
      continue;
    }
    if (*stored == value) continue;
    const bool upgrade = EmbedderVersionless(*stored) == EmbedderVersionless(value);
    if (embedder && options_.embedder->embeds_text() &&
        (policy == Change::kRebuild || (policy == Change::kUpgrade && upgrade))) {
      // The catalogue keeps every chunk's text: Open re-embeds it.
      plan->reembed_from = *stored;
      plan->settle.emplace_back(key, value);
    } else if (key == std::string(kMetaIndex) && policy == Change::kRebuild) {
      // The catalogue keeps every vector: a new generation makes Open rebuild
      // the index (the saved file, of the old factory, is not loaded).
      RAGKV_LOG(INFO) << "Retriever: " << options_.dir << ": index changed from '" << *stored
                      << "' to '" << value << "'; rebuilding it from the stored vectors";
      plan->settle.emplace_back(key, value);
      plan->rebuild_index = true;
    } else {
      refuse(absl::StrCat(key, " '", *stored, "', now '", value, "'"));
    }
  }
  if (!refused.empty()) {
    absl::Status st = absl::FailedPreconditionError(
        absl::StrCat("Retriever: ", options_.dir, " was created with ", refused));
    st.SetPayload(kSettingsRefused, absl::Cord(unfinished_reembed ? "reembed" : "changed"));
    return st;
  }
  // A re-embed writes `settle` with its last batch; an index rebuild alone
  // leaves the vectors as they are, so its settings are recorded now.
  if (plan->rebuild_index && !plan->reembed_from) {
    ASSIGN_OR_RETURN(std::optional<std::string> g, catalogue_->GetMeta(kMetaGeneration));
    uint64_t gen = 0;
    if (g && !absl::SimpleAtoi(*g, &gen)) return absl::DataLossError("catalogue meta generation corrupt");
    for (auto& kv : plan->settle) init.put_meta.push_back(std::move(kv));
    plan->settle.clear();
    init.put_meta.emplace_back(kMetaGeneration, absl::StrCat(gen + 1));
  }
  if (!init.put_meta.empty()) RETURN_IF_ERROR(catalogue_->Apply(init));
  return absl::OkStatus();
}

}  // namespace ragkv::retrieval
