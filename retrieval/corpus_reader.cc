#include "retrieval/corpus_reader.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "retrieval/internal/text.h"

namespace ragkv::retrieval {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open corpus file ", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return absl::InternalError(absl::StrCat("read error on ", path));
  return ss.str();
}

std::string BaseName(std::string_view path) {
  const size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

absl::Status CheckUniqueAndValid(const Corpus& corpus, absl::string_view name) {
  absl::flat_hash_set<std::string_view> seen;
  for (size_t i = 0; i < corpus.documents.size(); ++i) {
    const Document& d = corpus.documents[i];
    absl::Status s = ValidateDocument(d);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": document ", i, " (id '", d.id.substr(0, 64), "'): ", s.message()));
    }
    if (!seen.insert(d.id).second) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": duplicate document id '", d.id, "'"));
    }
  }
  return absl::OkStatus();
}

std::string JsonId(const nlohmann::json& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.dump();
}

}  // namespace

absl::Status ValidateDocument(const Document& doc) {
  if (doc.id.empty()) return absl::InvalidArgumentError("document id is empty");
  if (doc.id.size() > 1024) return absl::InvalidArgumentError("document id longer than 1024 bytes");
  if (absl::StripAsciiWhitespace(absl::string_view(doc.text)).empty()) {
    return absl::InvalidArgumentError(absl::StrCat("document '", doc.id, "' has empty text"));
  }
  if (internal::LooksBinary(doc.text) || internal::LooksBinary(doc.title) ||
      doc.id.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("document '", doc.id.substr(0, 64), "' looks binary (NUL or control bytes)"));
  }
  for (const std::string* f : {&doc.id, &doc.title, &doc.text}) {
    absl::Status s = internal::ValidateUtf8(*f);
    if (!s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "document '", doc.id.substr(0, 64), "' ",
          f == &doc.id ? "id" : (f == &doc.title ? "title" : "text"), ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Corpus> ParseJsonl(std::string_view content_in, std::string_view name_in) {
  const absl::string_view content(content_in.data(), content_in.size());
  const absl::string_view name(name_in.data(), name_in.size());
  Corpus corpus;
  size_t line_no = 0;
  for (absl::string_view line : absl::StrSplit(content, '\n')) {
    ++line_no;
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    nlohmann::json j = nlohmann::json::parse(std::string_view(line.data(), line.size()), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ":", line_no, ": not a JSON object"));
    }
    if (!j.contains("text") || !j["text"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ":", line_no, ": missing string field \"text\""));
    }
    Document d;
    d.id = j.contains("id") ? JsonId(j["id"]) : absl::StrCat(name, ":", line_no);
    if (j.contains("title") && j["title"].is_string()) d.title = j["title"].get<std::string>();
    d.text = j["text"].get<std::string>();
    corpus.documents.push_back(std::move(d));
  }
  RETURN_IF_ERROR(CheckUniqueAndValid(corpus, name));
  return corpus;
}

absl::StatusOr<Corpus> ParseMusique(std::string_view content, std::string_view name_in) {
  const absl::string_view name(name_in.data(), name_in.size());
  nlohmann::json j = nlohmann::json::parse(content, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": not a JSON list of {question, answers, passages}"));
  }
  Corpus corpus;
  // Passages are content-addressed: the same (title, text) retrieved for
  // several questions is one document (one chunk, one KV entry). Without
  // this, copies crowd each other out of the top-k (MuSiQue dev repeats 139
  // of its 1000 passages).
  absl::flat_hash_map<std::string, std::string> seen;  // title '\0' text -> doc id
  for (size_t qi = 0; qi < j.size(); ++qi) {
    const nlohmann::json& q = j[qi];
    if (!q.is_object() || !q.contains("passages") || !q["passages"].is_array()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": entry ", qi, " has no \"passages\" list"));
    }
    QaExample ex;
    if (q.contains("question") && q["question"].is_string()) ex.question = q["question"].get<std::string>();
    if (q.contains("answers") && q["answers"].is_array()) {
      for (const auto& a : q["answers"]) {
        if (a.is_string()) ex.answers.push_back(a.get<std::string>());
      }
    }
    const nlohmann::json& ps = q["passages"];
    for (size_t pi = 0; pi < ps.size(); ++pi) {
      const nlohmann::json& p = ps[pi];
      if (!p.is_object() || !p.contains("text") || !p["text"].is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": entry ", qi, " passage ", pi, " has no string \"text\""));
      }
      Document d;
      d.id = absl::StrCat("musique:", qi, ":", pi);
      if (p.contains("title") && p["title"].is_string()) d.title = p["title"].get<std::string>();
      d.text = p["text"].get<std::string>();
      auto [it, inserted] = seen.try_emplace(absl::StrCat(d.title, std::string(1, '\0'), d.text), d.id);
      ex.passage_doc_ids.push_back(it->second);
      if (inserted) corpus.documents.push_back(std::move(d));
    }
    corpus.questions.push_back(std::move(ex));
  }
  RETURN_IF_ERROR(CheckUniqueAndValid(corpus, name));
  return corpus;
}

absl::StatusOr<Document> ParseMarkdown(std::string_view content_in, std::string_view name) {
  const absl::string_view content(content_in.data(), content_in.size());
  Document d;
  d.id = std::string(name);
  for (absl::string_view line : absl::StrSplit(content, '\n')) {
    absl::string_view l = absl::StripLeadingAsciiWhitespace(line);
    if (absl::ConsumePrefix(&l, "# ")) {
      d.title = std::string(absl::StripAsciiWhitespace(l));
      break;
    }
  }
  d.text = std::string(content);
  RETURN_IF_ERROR(ValidateDocument(d));
  return d;
}

absl::StatusOr<Corpus> ReadCorpusFile(const std::string& path, CorpusFormat format) {
  if (format == CorpusFormat::kAuto) {
    if (absl::EndsWith(path, ".jsonl")) {
      format = CorpusFormat::kJsonl;
    } else if (absl::EndsWith(path, ".json")) {
      format = CorpusFormat::kMusique;
    } else if (absl::EndsWith(path, ".md") || absl::EndsWith(path, ".markdown")) {
      format = CorpusFormat::kMarkdown;
    } else {
      format = CorpusFormat::kPlainText;
    }
  }
  ASSIGN_OR_RETURN(std::string content, ReadFile(path));
  const std::string name = BaseName(path);
  switch (format) {
    case CorpusFormat::kJsonl:
      return ParseJsonl(content, name);
    case CorpusFormat::kMusique:
      return ParseMusique(content, name);
    case CorpusFormat::kMarkdown: {
      ASSIGN_OR_RETURN(Document d, ParseMarkdown(content, name));
      Corpus c;
      c.documents.push_back(std::move(d));
      return c;
    }
    default: {
      Corpus c;
      c.documents.push_back(Document{name, "", std::move(content)});
      RETURN_IF_ERROR(CheckUniqueAndValid(c, name));
      return c;
    }
  }
}

}  // namespace ragkv::retrieval
