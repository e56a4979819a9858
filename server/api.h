// api.h: the OpenAI-compatible HTTP API's request and response shapes
// (docs/protocol.md "HTTP API"), parsed and validated without llama.cpp:
// POST /v1/chat/completions and /v1/completions bodies in, OpenAI's JSON
// out, errors as {"error": {"message", "type", "param", "code"}}.
//
// Contract: every body is either parsed into a GenerationRequest whose
// fields are in range, or refused with an ApiError naming the field (400).
// Fields clients send with their default values are accepted (n: 1,
// penalties 0, response_format text, user, logprobs false); fields that
// would change the result and are not supported (n > 1, logprobs, tools,
// images, echo, best_of > 1) are refused by name, never ignored.
// Thread safety: pure functions.
#ifndef RAGKV_SERVER_API_H_
#define RAGKV_SERVER_API_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ragkv::server {

// Limits of one request (a body past kMaxBodyBytes is refused before parsing).
inline constexpr size_t kMaxBodyBytes = 8u << 20;
inline constexpr size_t kMaxDocuments = 64;
inline constexpr size_t kMaxStops = 4;
inline constexpr size_t kMaxMessages = 1024;
inline constexpr size_t kMaxSaltBytes = 1024;

// ApiError: an OpenAI error response.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // "" -> null
  std::string code;   // "" -> null
};
// ErrorJson: {"error": {...}}.
std::string ErrorJson(const ApiError& e);
ApiError BadRequest(std::string message, std::string param, std::string code = "");

struct ChatMessage {
  std::string role;  // system | developer | user | assistant
  std::string content;
};

// Document: vLLM's `documents` entry: its title line (may be empty) and
// text; or, by id, a document (`{"id": "doc"}`) or chunk (`{"id": 17}`) of
// the sidecar's catalogue, which the server resolves (ResolveDocuments) to
// one Document per chunk before templating: the chunk's text and id (the
// sidecar finds the chunk's stored KV in the prompt by its tokens).
struct Document {
  std::string title;
  std::string text;
  std::string doc_id;                 // by id: a catalogue document
  std::optional<uint64_t> chunk_id;   // by id: a catalogue chunk; resolved: the chunk's id
  bool by_id() const { return text.empty() && (!doc_id.empty() || chunk_id.has_value()); }
};
inline constexpr size_t kMaxResolvedDocuments = 256;

struct Sampling {
  double temperature = 1.0;  // 0: greedy
  double top_p = 1.0;
  std::optional<uint32_t> seed;
  int max_tokens = 0;  // 0: until the end of generation or the slot's context
  std::vector<std::string> stop;
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id, bias
};

// RagkvOptions: the `ragkv` extension object.
struct RagkvOptions {
  std::string mode;    // "" (the server's default: cacheblend, gate's ratio), full,
                       // cacheblend, reuse, prefix, auto, local (llama.cpp prefills all)
  double ratio = 0;    // cacheblend ratio; 0 = the server's
  // selector: cacheblend's row ranking by name (BlendOptions.selector); "" =
  // the server's.
  std::string selector;
  // adaptive_mass: cacheblend chooses the request's ratio, at most `ratio`
  // (or the server's): the fewest rows covering this share of the estimated
  // error (BlendOptions.adaptive_mass; docs/blend.md "Adaptive ratio",
  // 0.95 chosen on dev); 0 = a fixed ratio.
  double adaptive_mass = 0;
  // adaptive_threshold: the threshold rule instead (BlendOptions.
  // adaptive_threshold, 1.6e-4 chosen on dev; overrides adaptive_mass); 0 =
  // off.
  double adaptive_threshold = 0;
  // adaptive_budget: the budget rule instead (BlendOptions.adaptive_budget:
  // the mean ratio spent over recent requests; overrides both above); 0 =
  // the server's --adaptive-budget when the request sets no ratio and no
  // adaptive field, else off.
  double adaptive_budget = 0;
  // k: server-side retrieval: the top-k chunks of the sidecar's catalogue
  // for the last user message go in as documents, after the request's own.
  // -1 = the server's --retrieval-k; 0 = none.
  int k = -1;
  bool return_tokens = false;  // the response lists prompt and output token ids
  // reorder: the exact-prefix reorder pass (docs/services.md "Exact-prefix
  // reorder"): the documents are an unordered set, placed so that the
  // longest stored exact prefix comes first. Unset: the server's
  // --reorder-documents (off by default).
  std::optional<bool> reorder;
};

struct GenerationRequest {
  bool chat = true;
  std::string model;
  std::vector<ChatMessage> messages;  // chat
  std::vector<Document> documents;    // chat
  std::string prompt_text;            // completions
  std::vector<int32_t> prompt_ids;    // completions, when prompt_is_ids
  bool prompt_is_ids = false;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  Sampling sampling;
  RagkvOptions ragkv;
  // cache_salt (vLLM's field): the request's KV is found and stored only
  // under this tenant's key namespace (docs/kv_format.md "Salted keys"),
  // and a slot's kept cells serve only a request with the same salt.
  std::string cache_salt;
};

// ParseChatRequest / ParseCompletionRequest: false with *error set when the
// body is refused.
bool ParseChatRequest(const std::string& body, GenerationRequest* out, ApiError* error);
bool ParseCompletionRequest(const std::string& body, GenerationRequest* out, ApiError* error);
// ParseIngestRequest: POST /v1/documents: {"documents": [{"id", "text",
// "title"?}]}, 1 to kMaxDocuments of them, ids unique.
bool ParseIngestRequest(const std::string& body, std::vector<Document>* out, ApiError* error);

// Usage of one response; cached_tokens: prompt rows whose KV came from the
// store or from the slot's kept cells (its previous request's prefix)
// rather than a fresh prefill.
struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0;
};

// Timing: the TTFT breakdown sent in the `ragkv` extension field.
struct Timing {
  double retrieve_ms = 0;  // server-side retrieval, before admission (not in ttft_ms)
  int retrieved_chunks = 0;
  double queue_ms = 0, blend_ms = 0, handover_ms = 0, prefill_ms = 0, ttft_ms = 0;
  double e2e_ms = 0;  // arrival to the last token
  int handed_over_tokens = 0, recomputed_tokens = 0, prefilled_tokens = 0;
  int slot_prefix_tokens = 0;  // rows the slot's kept cells served
  // stored_prefix_tokens: handed-over rows the sidecar served from stored
  // exact prefix blocks (its exact-prefix cache: loaded, not recomputed).
  int stored_prefix_tokens = 0;
  std::string fallback;
  // blend_refused: why the server never blends this model (its state is not
  // chunk-composable); the prompt was llama.cpp's own prefill by design.
  std::string blend_refused;
  // The exact-prefix reorder pass (reorder_ran: it ran for this request):
  // the stored prefix of the prompt in the retriever's order and in the
  // order used (tokens, whole blocks), and that order (indices into the
  // resolved documents).
  bool reorder_ran = false;
  int reorder_prefix_before = 0, reorder_prefix_after = 0;
  std::vector<int> document_order;
};

// Completion: what one finished request produced.
struct Completion {
  std::string id;  // chatcmpl-... / cmpl-...
  int64_t created = 0;
  std::string model;
  std::string text;
  std::string finish_reason;  // stop | length
  Usage usage;
  Timing timing;
  std::vector<int32_t> prompt_ids, output_ids;  // with ragkv.return_tokens
  bool return_tokens = false;
};

// Response bodies (non-streaming) and SSE chunks ("data: {...}\n\n").
std::string ChatResponseJson(const Completion& c);
std::string CompletionResponseJson(const Completion& c);
// ChatChunk: a chat.completion.chunk; role_only: the first chunk (role,
// empty content); finish: "" for a content chunk.
std::string ChatChunkSse(const Completion& c, const std::string& delta, bool role_only,
                         const std::string& finish);
std::string CompletionChunkSse(const Completion& c, const std::string& delta,
                               const std::string& finish);
// UsageChunkSse: the final chunk with empty choices and usage
// (stream_options.include_usage).
std::string UsageChunkSse(const Completion& c, bool chat);
std::string ModelsJson(const std::string& id, int64_t created);

// Utf8CompleteLength: the length of the longest prefix of `s` that does not
// end inside a UTF-8 sequence (what may be sent now; the rest waits).
size_t Utf8CompleteLength(const std::string& s);

}  // namespace ragkv::server

#endif  // RAGKV_SERVER_API_H_
