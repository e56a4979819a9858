// prompt.h: a request's canonical prompt tokens (docs/protocol.md "HTTP
// API"): the chat messages through the model's chat template
// (llama_chat_apply_template: the GGUF's own tokenizer.chat_template, or
// the named default "chatml" when the file has none, or --chat-template),
// documents placed at the start of the last user message, and the whole
// templated string tokenized as one string in which only the template's
// own text may hold control tokens: a special token's text inside a
// message or document is tokenized as plain text.
//
// Documents layout: each document is its title line (when it has a title)
// and its text; documents are separated from each other and from the
// user's own text by a blank line:
//   "<title 1>\n<text 1>\n\n<title 2>\n<text 2>\n\n<the user's message>".
// Each document's token span (title line + text) is reported, so the
// sidecar can serve it as a document segment (stored KV by content).
//
// Passages (learning from traffic, docs/engines.md "Learning from
// traffic"): the content of every system, developer and user message is
// split at blank lines ("\n\n"); each paragraph of at least
// kMinPassageTokens tokens is a passage, reported as its token span (the
// rows whose tokens the prompt's tokenization shares with the paragraph's
// edges; a token straddling an edge stays outside). The last paragraph of
// the last user message is the question and never a passage, and neither
// are documents (they are documents already).
// Thread safety: a PromptBuilder is immutable after Create (tokenizing a
// llama_vocab is read-only); Build may run on many threads.
#ifndef RAGKV_SERVER_PROMPT_H_
#define RAGKV_SERVER_PROMPT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "server/api.h"

struct llama_model;
struct llama_vocab;

namespace ragkv::server {

inline constexpr char kDefaultChatTemplate[] = "chatml";
inline constexpr size_t kMinPassageTokens = 16;

struct BuiltPrompt {
  std::vector<int32_t> tokens;
  // documents: [begin, end) token rows of each document (title line + text).
  std::vector<std::pair<size_t, size_t>> documents;
  // document_chunks[i]: the catalogue chunk documents[i] was named by (its
  // KV is the operator's, shared by every tenant: /v1/cache/forget keeps
  // it).
  std::vector<std::optional<uint64_t>> document_chunks;
  // passages: [begin, end) token rows of the pasted paragraphs (sorted,
  // disjoint, none inside a document).
  std::vector<std::pair<size_t, size_t>> passages;
  std::string text;  // the templated string (chat) or the prompt text
};

class PromptBuilder {
 public:
  // Create: `chat_template`: a name of llama_chat_builtin_templates, or ""
  // (the file's own, else kDefaultChatTemplate). InvalidArgument when the
  // template is not one llama.cpp knows.
  static absl::StatusOr<std::unique_ptr<PromptBuilder>> Create(const llama_model* model,
                                                               const std::string& chat_template);
  // template_name: what Create chose ("the file's own" or a name).
  const std::string& template_name() const { return name_; }

  // Chat: the messages (+ documents) templated with the assistant turn opened.
  absl::StatusOr<BuiltPrompt> Chat(const std::vector<ChatMessage>& messages,
                                   const std::vector<Document>& documents) const;
  // ChatTokens: Chat's tokens alone (no document or passage spans: the
  // cheap form the reorder pass tries orders with).
  absl::StatusOr<std::vector<int32_t>> ChatTokens(const std::vector<ChatMessage>& messages,
                                                  const std::vector<Document>& documents) const;
  // Completion: the text tokenized (BOS as the vocabulary adds it; special
  // tokens as text), or the ids checked against the vocabulary.
  absl::StatusOr<BuiltPrompt> Completion(const GenerationRequest& request) const;

  // Tokenize: `text`, where only the byte ranges in `control_ok` may hold
  // control tokens (sorted, disjoint); BOS when the vocabulary adds one.
  std::vector<int32_t> Tokenize(const std::string& text,
                                const std::vector<std::pair<size_t, size_t>>& control_ok) const;

 private:
  PromptBuilder() = default;
  // Templated: the messages with the documents placed, templated and
  // tokenized (p.text, p.tokens); each message's byte range in p.text
  // (`content`, npos when absent) and where control tokens may be.
  struct Templated {
    std::vector<ChatMessage> msgs;
    std::vector<std::string> blocks;  // each document's title line + text
    size_t last_user = 0, docs_bytes = 0;
    BuiltPrompt p;
    std::vector<std::pair<size_t, size_t>> content, control;
  };
  absl::StatusOr<Templated> Template(const std::vector<ChatMessage>& messages,
                                     const std::vector<Document>& documents) const;
  absl::StatusOr<std::string> Apply(const std::vector<ChatMessage>& messages) const;
  std::vector<int32_t> TokenizeText(const std::string& text) const;
  // RowsOf: the token rows of p.text's bytes [b, e) within p.tokens
  // (`control`: where control tokens may be); empty when it holds none.
  // AddPassages: p->passages from the messages' paragraphs (`content`:
  // each message's byte range in p->text, npos when absent).
  void AddPassages(const std::vector<ChatMessage>& msgs,
                   const std::vector<std::pair<size_t, size_t>>& content, size_t last_user,
                   size_t docs_bytes, const std::vector<std::pair<size_t, size_t>>& control,
                   BuiltPrompt* p) const;
  std::pair<size_t, size_t> RowsOf(const BuiltPrompt& p,
                                   const std::vector<std::pair<size_t, size_t>>& control, size_t b,
                                   size_t e) const;

  const llama_model* model_ = nullptr;
  const llama_vocab* vocab_ = nullptr;
  std::string tmpl_;  // passed to llama_chat_apply_template
  std::string name_;
  // specials_: the text of every control / user-defined token, longest first.
  std::vector<std::pair<std::string, int32_t>> specials_;
};

}  // namespace ragkv::server

#endif  // RAGKV_SERVER_PROMPT_H_
