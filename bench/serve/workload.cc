#include "bench/serve/workload.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "model/loader.h"
#include "model/tokenizer.h"

namespace ragkv::bench_serve {
namespace {

using json = nlohmann::json;

// Mix: a 64-bit mixer (splitmix64's finaliser) for seeded scores.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// ValidUtf8: whether `s` is well-formed UTF-8.
bool ValidUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (int j = 1; j < n; ++j) {
      if ((static_cast<unsigned char>(s[i + j]) >> 6) != 2) return false;
    }
    i += n;
  }
  return true;
}

// Cut: `text` cut to at most `max_tokens` tokens of `tok`, at a word
// boundary; *tokens: the cut text's token count.
absl::StatusOr<std::string> Cut(const model::Tokenizer& tok, const std::string& text,
                                int max_tokens, int* tokens) {
  ASSIGN_OR_RETURN(std::vector<int32_t> ids, tok.Encode(text, false, false));
  if (static_cast<int>(ids.size()) <= max_tokens) {
    *tokens = static_cast<int>(ids.size());
    return text;
  }
  ids.resize(max_tokens);
  std::string cut = tok.Decode(ids);
  cut.resize(std::min(cut.size(), text.size()));
  const size_t space = cut.find_last_of(' ');
  if (space != std::string::npos && space > 0) cut.resize(space);
  ASSIGN_OR_RETURN(std::vector<int32_t> again, tok.Encode(cut, false, false));
  *tokens = static_cast<int>(again.size());
  return cut;
}

absl::StatusOr<json> ReadJson(const std::string& path) {
  std::ifstream f(path);
  if (!f) return absl::NotFoundError("cannot read " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_array()) {
    return absl::InvalidArgumentError(path + ": not a JSON array of {question, passages}");
  }
  return j;
}

}  // namespace

absl::StatusOr<Workload> Workload::Load(const WorkloadOptions& o) {
  ASSIGN_OR_RETURN(json j, ReadJson(o.corpus));
  ASSIGN_OR_RETURN(std::unique_ptr<model::Tokenizer> tok, model::LoadTokenizer(o.tokenizer_model));
  Workload w;
  w.o_ = o;
  std::set<std::string> seen;
  double tokens_sum = 0;
  for (const json& q : j) {
    if (!q.contains("question") || !q.contains("passages")) continue;
    w.questions_.push_back(q["question"].get<std::string>());
    for (const json& p : q["passages"]) {
      const std::string text = p.value("text", "");
      if (text.empty() || !seen.insert(text).second) continue;
      int n = 0;
      ASSIGN_OR_RETURN(std::string cut, Cut(*tok, text, o.passage_tokens, &n));
      w.pool_.push_back(std::move(cut));
      tokens_sum += n;
    }
  }
  const int n = static_cast<int>(w.pool_.size());
  if (n < o.k || w.questions_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(o.corpus, ": ", n, " passages, k = ", o.k));
  }
  w.mean_passage_tokens_ = tokens_sum / n;
  // Popularity: a seeded permutation of the pool gives the ranks.
  w.rank_.resize(n);
  std::iota(w.rank_.begin(), w.rank_.end(), 0);
  std::mt19937_64 rng(o.seed);
  std::shuffle(w.rank_.begin(), w.rank_.end(), rng);
  double sum = 0;
  for (int r = 0; r < n; ++r) {
    sum += 1.0 / std::pow(r + 1, o.zipf_s);
    w.cdf_.push_back(sum);
  }
  for (double& c : w.cdf_) c /= sum;
  return w;
}

std::vector<int> Workload::Order(int question, std::vector<int> passages) const {
  auto score = [&](int p) { return Mix(o_.seed ^ Mix(static_cast<uint64_t>(question) << 32 | p)); };
  std::sort(passages.begin(), passages.end(), [&](int a, int b) { return score(a) > score(b); });
  return passages;
}

std::vector<ServeRequest> Workload::Draw(int n, uint64_t stream) const {
  std::mt19937_64 rng(Mix(o_.seed) ^ Mix(stream + 1));
  std::uniform_real_distribution<double> u(0, 1);
  std::uniform_int_distribution<int> question(0, static_cast<int>(questions_.size()) - 1);
  std::vector<ServeRequest> out;
  for (int i = 0; i < n; ++i) {
    ServeRequest r;
    r.question = question(rng);
    std::set<int> picked;
    while (static_cast<int>(picked.size()) < o_.k) {
      const size_t rank = std::lower_bound(cdf_.begin(), cdf_.end(), u(rng)) - cdf_.begin();
      picked.insert(rank_[std::min(rank, rank_.size() - 1)]);
    }
    r.passages = Order(r.question, std::vector<int>(picked.begin(), picked.end()));
    r.documents = u(rng) < o_.documents_share;
    out.push_back(std::move(r));
  }
  return out;
}

ServeRequest Workload::NewQuestion(const ServeRequest& r, uint64_t stream) const {
  ServeRequest out = r;
  const int n = static_cast<int>(questions_.size());
  out.question = static_cast<int>((r.question + 1 + Mix(stream) % (n - 1)) % n);
  if (n == 1) out.question = r.question;
  return out;
}

std::vector<std::string> Workload::PassageTexts(const ServeRequest& r) const {
  std::vector<std::string> out;
  for (int p : r.passages) out.push_back(pool_[p]);
  return out;
}

std::string Workload::UserMessage(const ServeRequest& r) const {
  std::string s;
  for (int p : r.passages) absl::StrAppend(&s, pool_[p], "\n\n");
  return s + questions_[r.question];
}

std::string ChatBody(const Workload& w, const ServeRequest& r, const BodyOptions& o) {
  json body = {{"model", o.model},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}},
               {"temperature", 0},
               {"max_tokens", o.max_tokens}};
  if (o.send_documents && r.documents) {
    json docs = json::array();
    for (const std::string& t : w.PassageTexts(r)) docs.push_back({{"title", ""}, {"text", t}});
    body["documents"] = docs;
    body["messages"] = {{{"role", "user"}, {"content", w.Question(r)}}};
  } else {
    body["messages"] = {{{"role", "user"}, {"content", w.UserMessage(r)}}};
  }
  if (!o.ragkv_mode.empty()) body["ragkv"]["mode"] = o.ragkv_mode;
  if (o.reorder) body["ragkv"]["reorder"] = true;
  json bias = json::object();
  for (int32_t id : o.banned) bias[std::to_string(id)] = -100;
  if (!o.banned.empty()) body["logit_bias"] = bias;
  return body.dump();
}

absl::StatusOr<std::vector<int32_t>> BannedTokens(const std::string& gguf) {
  ASSIGN_OR_RETURN(std::unique_ptr<model::Tokenizer> tok, model::LoadTokenizer(gguf));
  std::vector<int32_t> out;
  for (int32_t id = 0; id < tok->vocab_size(); ++id) {
    if (id == tok->eos_id() || tok->IsControl(id) || !ValidUtf8(tok->DecodePiece(-1, id))) {
      out.push_back(id);
    }
  }
  return out;
}

}  // namespace ragkv::bench_serve
