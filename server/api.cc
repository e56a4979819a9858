#include "server/api.h"

#include <cmath>
#include <limits>
#include <string>
#include <tuple>

#include <nlohmann/json.hpp>

namespace ragkv::server {
namespace {

using json = nlohmann::json;

std::string Dump(const json& j) {
  // Invalid UTF-8 (a byte-fallback token cut mid-sequence) is replaced,
  // never thrown.
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

json NullOr(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

// Parser: field readers that remember the first error.
class Parser {
 public:
  explicit Parser(const json& body) : body_(body) {}
  bool ok() const { return ok_; }
  const ApiError& error() const { return error_; }
  bool Fail(std::string message, std::string param, std::string code = "") {
    if (ok_) error_ = BadRequest(std::move(message), std::move(param), std::move(code));
    ok_ = false;
    return false;
  }
  // Has: the field is present and not null.
  bool Has(const char* f) const { return body_.contains(f) && !body_[f].is_null(); }
  const json& At(const char* f) const { return body_[f]; }

  void Bool(const char* f, bool* out) {
    if (!Has(f)) return;
    if (!At(f).is_boolean()) Fail(std::string("'") + f + "' must be a boolean", f);
    else *out = At(f).get<bool>();
  }
  void Number(const char* f, double lo, double hi, double* out) {
    if (!Has(f)) return;
    if (!At(f).is_number()) {
      Fail(std::string("'") + f + "' must be a number", f);
      return;
    }
    const double v = At(f).get<double>();
    if (!(v >= lo && v <= hi)) {
      Fail(std::string("'") + f + "' must lie in [" + Num(lo) + ", " + Num(hi) + "]", f);
      return;
    }
    *out = v;
  }
  void Int(const char* f, int64_t lo, int64_t hi, int64_t* out) {
    if (!Has(f)) return;
    if (!At(f).is_number_integer()) {
      Fail(std::string("'") + f + "' must be an integer", f);
      return;
    }
    const int64_t v = At(f).is_number_unsigned()
                          ? static_cast<int64_t>(std::min<uint64_t>(At(f).get<uint64_t>(),
                                                                    std::numeric_limits<int64_t>::max()))
                          : At(f).get<int64_t>();
    if (v < lo || v > hi) {
      Fail(std::string("'") + f + "' must lie in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", f);
      return;
    }
    *out = v;
  }
  void String(const char* f, std::string* out) {
    if (!Has(f)) return;
    if (!At(f).is_string()) Fail(std::string("'") + f + "' must be a string", f);
    else *out = At(f).get<std::string>();
  }

 private:
  static std::string Num(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
  }
  const json& body_;
  bool ok_ = true;
  ApiError error_;
};

// ParseBody: the JSON object of `body`, or false with the error set.
bool ParseBody(const std::string& body, json* out, ApiError* error) {
  if (body.size() > kMaxBodyBytes) {
    *error = BadRequest("the request body is " + std::to_string(body.size()) +
                            " bytes, over the limit of " + std::to_string(kMaxBodyBytes),
                        "", "body_too_large");
    return false;
  }
  *out = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (out->is_discarded()) {
    *error = BadRequest("the request body is not valid JSON", "", "invalid_json");
    return false;
  }
  if (!out->is_object()) {
    *error = BadRequest("the request body must be a JSON object", "", "invalid_json");
    return false;
  }
  return true;
}

// Refusals: fields that would change the result and are not supported.
void CheckUnsupported(Parser* p, bool chat) {
  int64_t n = 1;
  p->Int("n", 1, 128, &n);
  if (p->ok() && n != 1) p->Fail("'n' > 1 is not supported (one choice per request)", "n");
  if (p->Has("logprobs")) {
    const json& l = p->At("logprobs");
    const bool on = l.is_boolean() ? l.get<bool>() : !(l.is_number() && l.get<double>() == 0);
    if (on) p->Fail("'logprobs' is not supported", "logprobs");
  }
  if (p->Has("top_logprobs")) p->Fail("'top_logprobs' is not supported", "top_logprobs");
  for (const char* f : {"presence_penalty", "frequency_penalty"}) {
    double v = 0;
    p->Number(f, -2, 2, &v);
    if (p->ok() && v != 0) p->Fail(std::string("'") + f + "' other than 0 is not supported", f);
  }
  for (const char* f : {"tools", "functions"}) {
    if (p->Has(f) && !(p->At(f).is_array() && p->At(f).empty())) {
      p->Fail(std::string("'") + f + "' (tool calling) is not supported", f);
    }
  }
  for (const char* f : {"tool_choice", "function_call"}) {
    if (p->Has(f) && !(p->At(f).is_string() && p->At(f).get<std::string>() == "none")) {
      p->Fail(std::string("'") + f + "' (tool calling) is not supported", f);
    }
  }
  if (p->Has("response_format")) {
    const json& r = p->At("response_format");
    if (!r.is_object() || r.value("type", json()) != json("text")) {
      p->Fail("'response_format' other than {\"type\": \"text\"} is not supported", "response_format");
    }
  }
  if (p->Has("user") && !p->At("user").is_string()) p->Fail("'user' must be a string", "user");
  if (!chat) {
    bool echo = false;
    p->Bool("echo", &echo);
    if (echo) p->Fail("'echo' is not supported", "echo");
    int64_t best_of = 1;
    p->Int("best_of", 1, 128, &best_of);
    if (p->ok() && best_of != 1) p->Fail("'best_of' > 1 is not supported", "best_of");
    if (p->Has("suffix")) p->Fail("'suffix' is not supported", "suffix");
  }
}

void ParseSampling(Parser* p, bool chat, GenerationRequest* r) {
  Sampling& s = r->sampling;
  p->Number("temperature", 0, 2, &s.temperature);
  p->Number("top_p", 0, 1, &s.top_p);
  if (p->ok() && p->Has("top_p") && s.top_p <= 0) p->Fail("'top_p' must be > 0", "top_p");
  int64_t seed = 0;
  if (p->Has("seed")) {
    p->Int("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &seed);
    s.seed = static_cast<uint32_t>(seed);
  }
  int64_t max_tokens = 0;
  p->Int("max_tokens", 1, 1 << 20, &max_tokens);
  if (chat) p->Int("max_completion_tokens", 1, 1 << 20, &max_tokens);
  s.max_tokens = static_cast<int>(max_tokens);
  if (p->Has("stop")) {
    const json& st = p->At("stop");
    if (st.is_string()) {
      if (!st.get<std::string>().empty()) s.stop.push_back(st.get<std::string>());
    } else if (st.is_array() && st.size() <= kMaxStops) {
      for (const json& e : st) {
        if (!e.is_string()) {
          p->Fail("'stop' must be a string or an array of strings", "stop");
          break;
        }
        if (!e.get<std::string>().empty()) s.stop.push_back(e.get<std::string>());
      }
    } else {
      p->Fail("'stop' must be a string or an array of at most 4 strings", "stop");
    }
  }
  if (p->Has("logit_bias")) {
    const json& lb = p->At("logit_bias");
    if (!lb.is_object()) {
      p->Fail("'logit_bias' must be an object of token id -> bias", "logit_bias");
    } else {
      for (const auto& [k, v] : lb.items()) {
        char* end = nullptr;
        const long id = std::strtol(k.c_str(), &end, 10);
        if (k.empty() || *end != '\0' || id < 0 || id > std::numeric_limits<int32_t>::max() ||
            !v.is_number() || std::fabs(v.get<double>()) > 100) {
          p->Fail("'logit_bias' keys must be token ids and values numbers in [-100, 100]",
                  "logit_bias");
          break;
        }
        s.logit_bias.emplace_back(static_cast<int32_t>(id), v.get<float>());
      }
    }
  }
}

void ParseCommon(Parser* p, bool chat, GenerationRequest* r) {
  r->chat = chat;
  if (!p->Has("model")) p->Fail("'model' is required", "model");
  p->String("model", &r->model);
  p->Bool("stream", &r->stream);
  if (p->Has("stream_options")) {
    const json& so = p->At("stream_options");
    if (!so.is_object()) {
      p->Fail("'stream_options' must be an object", "stream_options");
    } else if (so.contains("include_usage") && !so["include_usage"].is_null()) {
      if (!so["include_usage"].is_boolean()) {
        p->Fail("'stream_options.include_usage' must be a boolean", "stream_options.include_usage");
      } else {
        r->include_usage = so["include_usage"].get<bool>();
      }
    }
  }
  ParseSampling(p, chat, r);
  CheckUnsupported(p, chat);
  p->String("cache_salt", &r->cache_salt);
  if (p->ok() && r->cache_salt.size() > kMaxSaltBytes) {
    p->Fail("'cache_salt' is over " + std::to_string(kMaxSaltBytes) + " bytes", "cache_salt");
  }
  if (p->Has("ragkv")) {
    const json& x = p->At("ragkv");
    if (!x.is_object()) {
      p->Fail("'ragkv' must be an object", "ragkv");
      return;
    }
    Parser q(x);
    q.String("mode", &r->ragkv.mode);
    q.Number("ratio", 0, 1, &r->ragkv.ratio);
    q.Number("adaptive_mass", 0, 1, &r->ragkv.adaptive_mass);
    q.Number("adaptive_threshold", 0, 1, &r->ragkv.adaptive_threshold);
    q.Number("adaptive_budget", 0, 1, &r->ragkv.adaptive_budget);
    q.String("selector", &r->ragkv.selector);
    q.Bool("return_tokens", &r->ragkv.return_tokens);
    if (q.Has("reorder")) {
      bool reorder = false;
      q.Bool("reorder", &reorder);
      if (q.ok()) r->ragkv.reorder = reorder;
    }
    int64_t k = r->ragkv.k;
    q.Int("k", 0, static_cast<int64_t>(kMaxDocuments), &k);
    r->ragkv.k = static_cast<int>(k);
    static const char* kModes[] = {"", "full", "cacheblend", "reuse", "prefix", "auto", "local"};
    bool known = false;
    for (const char* m : kModes) known = known || r->ragkv.mode == m;
    if (q.ok() && !known) {
      q.Fail("'ragkv.mode' must be one of full, cacheblend, reuse, prefix, auto, local", "mode");
    }
    // The names of blend::SelectorName (server_api links no blend code).
    static const char* kSelectors[] = {"",          "lookahead-deviation", "attended-deviation",
                                       "deviation", "deviation+attention", "query-attention",
                                       "chunk-head"};
    known = false;
    for (const char* s : kSelectors) known = known || r->ragkv.selector == s;
    if (q.ok() && !known) {
      q.Fail("'ragkv.selector' must be one of lookahead-deviation, attended-deviation, deviation, "
             "deviation+attention, query-attention, chunk-head",
             "selector");
    }
    if (!q.ok()) p->Fail(q.error().message, "ragkv." + q.error().param);
  }
}

// MessageContent: a message's content (a string, or text parts).
bool MessageContent(Parser* p, const json& c, const std::string& param, std::string* out) {
  if (c.is_null()) return true;
  if (c.is_string()) {
    *out = c.get<std::string>();
    return true;
  }
  if (!c.is_array()) return p->Fail("'" + param + "' must be a string or an array of parts", param);
  for (size_t i = 0; i < c.size(); ++i) {
    const json& part = c[i];
    const std::string pp = param + "[" + std::to_string(i) + "]";
    if (!part.is_object() || !part.contains("type") || !part["type"].is_string()) {
      return p->Fail("'" + pp + "' must be an object with a 'type'", pp);
    }
    const std::string type = part["type"].get<std::string>();
    if (type != "text") {
      return p->Fail("content parts of type '" + type + "' (images, audio, files) are not supported",
                     pp);
    }
    if (!part.contains("text") || !part["text"].is_string()) {
      return p->Fail("'" + pp + ".text' must be a string", pp + ".text");
    }
    *out += part["text"].get<std::string>();
  }
  return true;
}

void ParseMessages(Parser* p, GenerationRequest* r) {
  if (!p->Has("messages")) {
    p->Fail("'messages' is required", "messages");
    return;
  }
  const json& ms = p->At("messages");
  if (!ms.is_array() || ms.empty() || ms.size() > kMaxMessages) {
    p->Fail("'messages' must be a non-empty array (at most " + std::to_string(kMaxMessages) + ")",
            "messages");
    return;
  }
  for (size_t i = 0; i < ms.size() && p->ok(); ++i) {
    const std::string param = "messages[" + std::to_string(i) + "]";
    const json& m = ms[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
      p->Fail("'" + param + "' must be an object with a string 'role'", param + ".role");
      return;
    }
    ChatMessage msg;
    msg.role = m["role"].get<std::string>();
    if (msg.role != "system" && msg.role != "developer" && msg.role != "user" &&
        msg.role != "assistant") {
      p->Fail("'" + param + ".role' '" + msg.role +
                  "' is not supported (system, developer, user, assistant)",
              param + ".role");
      return;
    }
    if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
      p->Fail("'" + param + ".tool_calls' (tool calling) is not supported", param + ".tool_calls");
      return;
    }
    if (!MessageContent(p, m.value("content", json()), param + ".content", &msg.content)) return;
    if (msg.content.find('\0') != std::string::npos) {
      p->Fail("'" + param + ".content' holds a NUL character", param + ".content");
      return;
    }
    if (msg.role == "developer") msg.role = "system";
    r->messages.push_back(std::move(msg));
  }
}

void ParseDocuments(Parser* p, GenerationRequest* r) {
  if (!p->Has("documents")) return;
  const json& ds = p->At("documents");
  if (!ds.is_array() || ds.size() > kMaxDocuments) {
    p->Fail("'documents' must be an array of at most " + std::to_string(kMaxDocuments) +
                " {\"text\", \"title\"} objects",
            "documents");
    return;
  }
  for (size_t i = 0; i < ds.size(); ++i) {
    const std::string param = "documents[" + std::to_string(i) + "]";
    const json& d = ds[i];
    if (d.is_object() && d.contains("id") && !d.contains("text")) {
      Document doc;
      if (d["id"].is_string() && !d["id"].get<std::string>().empty()) {
        doc.doc_id = d["id"].get<std::string>();
      } else if (d["id"].is_number_unsigned()) {
        doc.chunk_id = d["id"].get<uint64_t>();
      } else {
        p->Fail("'" + param + ".id' must be a document id (a non-empty string) or a chunk id "
                "(a non-negative integer)", param + ".id");
        return;
      }
      r->documents.push_back(std::move(doc));
      continue;
    }
    if (!d.is_object() || !d.contains("text") || !d["text"].is_string() ||
        d["text"].get<std::string>().empty()) {
      p->Fail("'" + param + ".text' must be a non-empty string", param + ".text");
      return;
    }
    Document doc;
    doc.text = d["text"].get<std::string>();
    if (doc.text.find('\0') != std::string::npos) {
      p->Fail("'" + param + ".text' holds a NUL character", param + ".text");
      return;
    }
    if (d.contains("title") && !d["title"].is_null()) {
      if (!d["title"].is_string()) {
        p->Fail("'" + param + ".title' must be a string", param + ".title");
        return;
      }
      doc.title = d["title"].get<std::string>();
    }
    r->documents.push_back(std::move(doc));
  }
  if (!r->documents.empty()) {
    bool has_user = false;
    for (const ChatMessage& m : r->messages) has_user = has_user || m.role == "user";
    if (!has_user) p->Fail("'documents' need a user message to go in", "documents");
  }
}

void ParsePrompt(Parser* p, GenerationRequest* r) {
  if (!p->Has("prompt")) {
    p->Fail("'prompt' is required", "prompt");
    return;
  }
  json pr = p->At("prompt");
  // A one-element batch is the prompt itself.
  if (pr.is_array() && pr.size() == 1 && (pr[0].is_string() || pr[0].is_array())) pr = pr[0];
  if (pr.is_string()) {
    r->prompt_text = pr.get<std::string>();
    if (r->prompt_text.empty()) p->Fail("'prompt' is empty", "prompt");
    return;
  }
  if (pr.is_array() && !pr.empty()) {
    for (const json& t : pr) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 ||
          t.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        p->Fail("'prompt' must be a string or an array of token ids (one prompt per request)",
                "prompt");
        return;
      }
      r->prompt_ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    r->prompt_is_ids = true;
    return;
  }
  p->Fail("'prompt' must be a non-empty string or array of token ids (one prompt per request)",
          "prompt");
}

json UsageJson(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json Extension(const Completion& c) {
  const Timing& t = c.timing;
  json x = {{"ttft_ms", t.ttft_ms},         {"queue_ms", t.queue_ms},
            {"retrieve_ms", t.retrieve_ms}, {"retrieved_chunks", t.retrieved_chunks},
            {"blend_ms", t.blend_ms},       {"handover_ms", t.handover_ms},
            {"prefill_ms", t.prefill_ms},   {"handed_over_tokens", t.handed_over_tokens},
            {"recomputed_tokens", t.recomputed_tokens},
            {"prefilled_tokens", t.prefilled_tokens},
            {"slot_prefix_tokens", t.slot_prefix_tokens},
            {"stored_prefix_tokens", t.stored_prefix_tokens}, {"fallback", NullOr(t.fallback)},
            {"blend_refused", NullOr(t.blend_refused)}};
  if (t.reorder_ran) {
    x["reorder"] = {{"prefix_tokens_before", t.reorder_prefix_before},
                    {"prefix_tokens_after", t.reorder_prefix_after},
                    {"document_order", t.document_order}};
  }
  if (c.return_tokens) {
    x["prompt_token_ids"] = c.prompt_ids;
    x["output_token_ids"] = c.output_ids;
  }
  return x;
}

json Head(const Completion& c, const char* object) {
  return {{"id", c.id}, {"object", object}, {"created", c.created}, {"model", c.model},
          {"system_fingerprint", nullptr}};
}

std::string Sse(const json& j) { return "data: " + Dump(j) + "\n\n"; }

}  // namespace

ApiError BadRequest(std::string message, std::string param, std::string code) {
  ApiError e;
  e.status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

std::string ErrorJson(const ApiError& e) {
  return Dump({{"error",
                {{"message", e.message},
                 {"type", e.type},
                 {"param", NullOr(e.param)},
                 {"code", NullOr(e.code)}}}});
}

bool ParseChatRequest(const std::string& body, GenerationRequest* out, ApiError* error) {
  json j;
  if (!ParseBody(body, &j, error)) return false;
  Parser p(j);
  *out = GenerationRequest{};
  ParseCommon(&p, /*chat=*/true, out);
  if (p.ok()) ParseMessages(&p, out);
  if (p.ok()) ParseDocuments(&p, out);
  if (!p.ok()) *error = p.error();
  return p.ok();
}

bool ParseCompletionRequest(const std::string& body, GenerationRequest* out, ApiError* error) {
  json j;
  if (!ParseBody(body, &j, error)) return false;
  Parser p(j);
  *out = GenerationRequest{};
  ParseCommon(&p, /*chat=*/false, out);
  if (p.ok()) ParsePrompt(&p, out);
  if (p.ok() && p.Has("documents")) p.Fail("'documents' belong to /v1/chat/completions", "documents");
  if (!p.ok()) *error = p.error();
  return p.ok();
}

bool ParseIngestRequest(const std::string& body, std::vector<Document>* out, ApiError* error) {
  json j;
  if (!ParseBody(body, &j, error)) return false;
  Parser p(j);
  out->clear();
  const json* ds = p.Has("documents") ? &p.At("documents") : nullptr;
  if (ds == nullptr || !ds->is_array() || ds->empty() || ds->size() > kMaxDocuments) {
    *error = BadRequest("'documents' must be an array of 1 to " + std::to_string(kMaxDocuments) +
                            " {\"id\", \"text\", \"title\"} objects",
                        "documents");
    return false;
  }
  for (size_t i = 0; i < ds->size(); ++i) {
    const std::string param = "documents[" + std::to_string(i) + "]";
    const json& d = (*ds)[i];
    auto str = [&](const char* f, bool required, std::string* v) {
      const bool has = d.is_object() && d.contains(f) && !d[f].is_null();
      if (has && d[f].is_string() && !d[f].get<std::string>().empty()) {
        *v = d[f].get<std::string>();
        return v->find('\0') == std::string::npos;
      }
      return !required && !has;
    };
    Document doc;
    for (const auto& [f, v, required] : {std::tuple{"id", &doc.doc_id, true},
                                         std::tuple{"text", &doc.text, true},
                                         std::tuple{"title", &doc.title, false}}) {
      if (!str(f, required, v)) {
        *error = BadRequest("'" + param + "." + f + "' must be a non-empty string without NUL",
                            param + "." + f);
        return false;
      }
    }
    for (const Document& seen : *out) {
      if (seen.doc_id == doc.doc_id) {
        *error = BadRequest("'" + param + ".id' repeats " + doc.doc_id, param + ".id");
        return false;
      }
    }
    out->push_back(std::move(doc));
  }
  return true;
}

std::string ChatResponseJson(const Completion& c) {
  json j = Head(c, "chat.completion");
  j["choices"] = json::array({{{"index", 0},
                               {"message", {{"role", "assistant"}, {"content", c.text}}},
                               {"logprobs", nullptr},
                               {"finish_reason", c.finish_reason}}});
  j["usage"] = UsageJson(c.usage);
  j["ragkv"] = Extension(c);
  return Dump(j);
}

std::string CompletionResponseJson(const Completion& c) {
  json j = Head(c, "text_completion");
  j["choices"] = json::array(
      {{{"index", 0}, {"text", c.text}, {"logprobs", nullptr}, {"finish_reason", c.finish_reason}}});
  j["usage"] = UsageJson(c.usage);
  j["ragkv"] = Extension(c);
  return Dump(j);
}

std::string ChatChunkSse(const Completion& c, const std::string& delta, bool role_only,
                         const std::string& finish) {
  json j = Head(c, "chat.completion.chunk");
  json d = json::object();
  if (role_only) {
    d = {{"role", "assistant"}, {"content", ""}};
  } else if (!delta.empty()) {
    d = {{"content", delta}};
  }
  j["choices"] = json::array({{{"index", 0}, {"delta", d}, {"logprobs", nullptr},
                               {"finish_reason", NullOr(finish)}}});
  if (!finish.empty()) j["ragkv"] = Extension(c);
  return Sse(j);
}

std::string CompletionChunkSse(const Completion& c, const std::string& delta,
                               const std::string& finish) {
  json j = Head(c, "text_completion");
  j["choices"] = json::array(
      {{{"index", 0}, {"text", delta}, {"logprobs", nullptr}, {"finish_reason", NullOr(finish)}}});
  if (!finish.empty()) j["ragkv"] = Extension(c);
  return Sse(j);
}

std::string UsageChunkSse(const Completion& c, bool chat) {
  json j = Head(c, chat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = json::array();
  j["usage"] = UsageJson(c.usage);
  return Sse(j);
}

std::string ModelsJson(const std::string& id, int64_t created) {
  return Dump({{"object", "list"},
               {"data", json::array({{{"id", id},
                                      {"object", "model"},
                                      {"created", created},
                                      {"owned_by", "ragkv"}}})}});
}

size_t Utf8CompleteLength(const std::string& s) {
  // Look back at most 3 bytes for a lead byte whose sequence is cut.
  const size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    size_t need = 1;
    if ((c & 0xE0) == 0xC0) need = 2;
    else if ((c & 0xF0) == 0xE0) need = 3;
    else if ((c & 0xF8) == 0xF0) need = 4;
    return back < need ? n - back : n;
  }
  return n;
}

}  // namespace ragkv::server
