#include "server/prompt.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "llama.h"

namespace ragkv::server {
namespace {

// ContentRange: where `content` lies in `text` at or after `from`; npos when
// the template changed it (trimmed, for instance).
size_t Find(const std::string& text, const std::string& content, size_t from) {
  if (content.empty()) return std::string::npos;
  return text.find(content, from);
}

// Complement: the byte ranges of [0, n) not in `taken` (sorted, disjoint).
std::vector<std::pair<size_t, size_t>> Complement(
    const std::vector<std::pair<size_t, size_t>>& taken, size_t n) {
  std::vector<std::pair<size_t, size_t>> out;
  size_t at = 0;
  for (const auto& [b, e] : taken) {
    if (b > at) out.emplace_back(at, b);
    at = std::max(at, e);
  }
  if (at < n) out.emplace_back(at, n);
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PromptBuilder>> PromptBuilder::Create(
    const llama_model* model, const std::string& chat_template) {
  std::unique_ptr<PromptBuilder> b(new PromptBuilder());
  b->model_ = model;
  b->vocab_ = llama_model_get_vocab(model);
  if (!chat_template.empty()) {
    std::vector<const char*> names(256);
    const int n = llama_chat_builtin_templates(names.data(), names.size());
    bool known = false;
    std::string list;
    for (int i = 0; i < std::min<int>(n, names.size()); ++i) {
      known = known || chat_template == names[i];
      absl::StrAppend(&list, i ? ", " : "", names[i]);
    }
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat("--chat-template ", chat_template,
                                                     " is not one of llama.cpp's: ", list));
    }
    b->tmpl_ = b->name_ = chat_template;
  } else if (const char* own = llama_model_chat_template(model, nullptr); own != nullptr && *own) {
    b->tmpl_ = own;
    b->name_ = "the file's own (tokenizer.chat_template)";
  } else {
    b->tmpl_ = b->name_ = kDefaultChatTemplate;
  }
  if (!b->Apply({{"user", "x"}}).ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the chat template (", b->name_,
        ") is not one llama_chat_apply_template supports; name one with --chat-template"));
  }
  const int32_t n_vocab = llama_vocab_n_tokens(b->vocab_);
  for (int32_t id = 0; id < n_vocab; ++id) {
    const int attr = llama_vocab_get_attr(b->vocab_, id);
    if ((attr & (LLAMA_TOKEN_ATTR_CONTROL | LLAMA_TOKEN_ATTR_USER_DEFINED |
                 LLAMA_TOKEN_ATTR_UNKNOWN)) == 0) {
      continue;
    }
    const char* t = llama_vocab_get_text(b->vocab_, id);
    if (t != nullptr && *t) b->specials_.emplace_back(t, id);
  }
  std::stable_sort(b->specials_.begin(), b->specials_.end(),
                   [](const auto& x, const auto& y) { return x.first.size() > y.first.size(); });
  return b;
}

absl::StatusOr<std::string> PromptBuilder::Apply(const std::vector<ChatMessage>& messages) const {
  std::vector<llama_chat_message> msgs;
  for (const ChatMessage& m : messages) msgs.push_back({m.role.c_str(), m.content.c_str()});
  size_t total = 0;
  for (const ChatMessage& m : messages) total += m.content.size() + m.role.size();
  std::string out(2 * total + 1024, '\0');
  int32_t n = llama_chat_apply_template(tmpl_.c_str(), msgs.data(), msgs.size(), true, out.data(),
                                        static_cast<int32_t>(out.size()));
  if (n > static_cast<int32_t>(out.size())) {
    out.resize(n);
    n = llama_chat_apply_template(tmpl_.c_str(), msgs.data(), msgs.size(), true, out.data(),
                                  static_cast<int32_t>(out.size()));
  }
  if (n < 0) return absl::InvalidArgumentError("llama_chat_apply_template failed");
  out.resize(n);
  return out;
}

std::vector<int32_t> PromptBuilder::TokenizeText(const std::string& text) const {
  std::vector<int32_t> out(text.size() + 8);
  int32_t n = llama_tokenize(vocab_, text.data(), static_cast<int32_t>(text.size()), out.data(),
                             static_cast<int32_t>(out.size()), false, false);
  if (n < 0) {
    out.resize(-n);
    n = llama_tokenize(vocab_, text.data(), static_cast<int32_t>(text.size()), out.data(),
                       static_cast<int32_t>(out.size()), false, false);
  }
  out.resize(std::max(n, 0));
  return out;
}

std::vector<int32_t> PromptBuilder::Tokenize(
    const std::string& text, const std::vector<std::pair<size_t, size_t>>& control_ok) const {
  // As llama.cpp's own tokenizer with parse_special: the string is cut at
  // control tokens (here only inside `control_ok`), each text fragment is
  // tokenized alone.
  std::vector<int32_t> out;
  if (llama_vocab_get_add_bos(vocab_)) out.push_back(llama_vocab_bos(vocab_));
  size_t frag = 0, at = 0, range = 0;
  auto flush = [&](size_t end) {
    if (end > frag) {
      std::vector<int32_t> t = TokenizeText(text.substr(frag, end - frag));
      out.insert(out.end(), t.begin(), t.end());
    }
  };
  while (at < text.size()) {
    while (range < control_ok.size() && control_ok[range].second <= at) ++range;
    const bool ok = range < control_ok.size() && control_ok[range].first <= at;
    int32_t hit = -1;
    size_t len = 0;
    if (ok) {
      for (const auto& [s, id] : specials_) {
        if (at + s.size() <= control_ok[range].second &&
            std::memcmp(text.data() + at, s.data(), s.size()) == 0) {
          hit = id;
          len = s.size();
          break;
        }
      }
    }
    if (hit < 0) {
      ++at;
      continue;
    }
    flush(at);
    out.push_back(hit);
    at += len;
    frag = at;
  }
  flush(text.size());
  if (llama_vocab_get_add_eos(vocab_)) out.push_back(llama_vocab_eos(vocab_));
  return out;
}

std::pair<size_t, size_t> PromptBuilder::RowsOf(
    const BuiltPrompt& p, const std::vector<std::pair<size_t, size_t>>& control, size_t b,
    size_t e) const {
  // The rows shared with the whole prompt by the tokenizations of the text
  // up to b and up to e (minus an EOS the vocabulary may append).
  auto clip = [&](size_t n) {
    std::vector<std::pair<size_t, size_t>> c;
    for (auto [x, y] : control) {
      if (x < n) c.emplace_back(x, std::min(y, n));
    }
    return c;
  };
  auto agree = [&](size_t n) {
    const std::vector<int32_t> t = Tokenize(p.text.substr(0, n), clip(n));
    size_t k = 0;
    const size_t lim = std::min(t.size(), p.tokens.size());
    while (k < lim && t[k] == p.tokens[k]) ++k;
    return k;
  };
  const size_t begin = agree(b), end = agree(e);
  return end > begin ? std::pair{begin, end} : std::pair<size_t, size_t>{0, 0};
}

namespace {

// Paragraphs: the byte ranges of `text`'s blank-line-separated paragraphs
// inside [b, e), offsets into the whole text.
std::vector<std::pair<size_t, size_t>> Paragraphs(const std::string& text, size_t b, size_t e) {
  std::vector<std::pair<size_t, size_t>> out;
  size_t at = b;
  while (at < e) {
    size_t sep = text.find("\n\n", at);
    if (sep == std::string::npos || sep >= e) sep = e;
    if (sep > at) out.emplace_back(at, sep);
    at = sep;
    while (at < e && text[at] == '\n') ++at;
  }
  return out;
}

}  // namespace

absl::StatusOr<PromptBuilder::Templated> PromptBuilder::Template(
    const std::vector<ChatMessage>& messages, const std::vector<Document>& documents) const {
  Templated t;
  t.msgs = messages;
  // Documents go at the start of the last user message.
  t.last_user = t.msgs.size();
  for (size_t i = 0; i < t.msgs.size(); ++i) {
    if (t.msgs[i].role == "user") t.last_user = i;
  }
  if (!documents.empty() && t.last_user < t.msgs.size()) {
    std::string prefix;
    for (const Document& d : documents) {
      t.blocks.push_back(d.title.empty() ? d.text : absl::StrCat(d.title, "\n", d.text));
      absl::StrAppend(&prefix, t.blocks.back(), "\n\n");
    }
    t.docs_bytes = prefix.size();
    t.msgs[t.last_user].content = prefix + t.msgs[t.last_user].content;
  }
  auto text = Apply(t.msgs);
  if (!text.ok()) return text.status();
  t.p.text = std::move(*text);
  // The messages' own bytes never hold control tokens.
  t.content.assign(t.msgs.size(), {std::string::npos, 0});
  std::vector<std::pair<size_t, size_t>> taken;
  size_t cursor = 0;
  for (size_t i = 0; i < t.msgs.size(); ++i) {
    absl::string_view c = t.msgs[i].content;
    size_t at = Find(t.p.text, std::string(c), cursor);
    if (at == std::string::npos) {  // a template that trims the content
      c = absl::StripAsciiWhitespace(c);
      at = Find(t.p.text, std::string(c), cursor);
    }
    if (at == std::string::npos) {
      if (c.empty()) continue;
      // Never let a message's bytes pass as template text (they could
      // spell control tokens).
      return absl::InvalidArgumentError(absl::StrCat(
          "the chat template (", name_, ") changed message ", i,
          "'s text; it cannot be tokenized safely"));
    }
    t.content[i] = {at, at + c.size()};
    taken.push_back(t.content[i]);
    cursor = at + c.size();
  }
  t.control = Complement(taken, t.p.text.size());
  t.p.tokens = Tokenize(t.p.text, t.control);
  return t;
}

absl::StatusOr<std::vector<int32_t>> PromptBuilder::ChatTokens(
    const std::vector<ChatMessage>& messages, const std::vector<Document>& documents) const {
  absl::StatusOr<Templated> t = Template(messages, documents);
  if (!t.ok()) return t.status();
  return std::move(t->p.tokens);
}

absl::StatusOr<BuiltPrompt> PromptBuilder::Chat(const std::vector<ChatMessage>& messages,
                                                const std::vector<Document>& documents) const {
  absl::StatusOr<Templated> t = Template(messages, documents);
  if (!t.ok()) return t.status();
  BuiltPrompt& p = t->p;
  if (!t->blocks.empty() && t->content[t->last_user].first != std::string::npos) {
    size_t b = t->content[t->last_user].first;
    for (size_t i = 0; i < t->blocks.size(); ++i) {
      const auto rows = RowsOf(p, t->control, b, b + t->blocks[i].size());
      b += t->blocks[i].size() + 2;  // "\n\n"
      if (rows.second <= rows.first + 1) continue;
      p.documents.push_back(rows);
      p.document_chunks.push_back(documents[i].chunk_id);
    }
  }
  AddPassages(t->msgs, t->content, t->last_user, t->docs_bytes, t->control, &p);
  return std::move(p);
}

void PromptBuilder::AddPassages(const std::vector<ChatMessage>& msgs,
                                const std::vector<std::pair<size_t, size_t>>& content,
                                size_t last_user, size_t docs_bytes,
                                const std::vector<std::pair<size_t, size_t>>& control,
                                BuiltPrompt* p) const {
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (msgs[i].role == "assistant" || content[i].first == std::string::npos) continue;
    const size_t from = content[i].first + (i == last_user ? docs_bytes : 0);
    std::vector<std::pair<size_t, size_t>> paras = Paragraphs(p->text, from, content[i].second);
    if (i == last_user && !paras.empty()) paras.pop_back();  // the question
    for (const auto& [b, e] : paras) {
      const auto rows = RowsOf(*p, control, b, e);
      if (rows.second - rows.first >= kMinPassageTokens) p->passages.push_back(rows);
    }
  }
}

absl::StatusOr<BuiltPrompt> PromptBuilder::Completion(const GenerationRequest& r) const {
  BuiltPrompt p;
  if (!r.prompt_is_ids) {
    p.text = r.prompt_text;
    p.tokens = Tokenize(r.prompt_text, {});
    return p;
  }
  const int32_t n_vocab = llama_vocab_n_tokens(vocab_);
  for (int32_t id : r.prompt_ids) {
    if (id < 0 || id >= n_vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("'prompt' holds token id ", id, ", outside the vocabulary of ", n_vocab));
    }
  }
  p.tokens = r.prompt_ids;
  return p;
}

}  // namespace ragkv::server
