// client.h: one streaming chat request of `ragkv bench serve` over HTTP/1.1
// on loopback, timed from the moment it is sent: TTFT = the first
// server-sent `data:` chunk whose choices[0].delta.content is non-empty;
// e2e = `data: [DONE]` (or the end of the body). Usage (prompt, completion
// and cached tokens) comes from whichever chunk carries `usage` (OpenAI's
// stream_options.include_usage; ragkv and llama-server both send it).
//
// Thread safety: StreamChat is reentrant (one connection per call).
#ifndef RAGKV_BENCH_SERVE_CLIENT_H_
#define RAGKV_BENCH_SERVE_CLIENT_H_

#include <string>

namespace ragkv::bench_serve {

struct StreamResult {
  bool ok = false;            // 200, a content chunk, [DONE], no error event
  std::string error;          // why not ok (status, transport, error event)
  double ttft_ms = 0;         // to the first non-empty content
  double e2e_ms = 0;          // to [DONE]
  std::string first_content;  // the first non-empty content piece
  int content_chunks = 0;
  int prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  // ragkv's TTFT breakdown (the `ragkv` object of its finishing chunk;
  // -1 when the server sends none).
  double blend_ms = -1, prefill_ms = -1;
  int recomputed_tokens = 0, prefilled_tokens = 0;
  // The exact-prefix reorder pass (ragkv.reorder; before -1: it did not
  // run) and the rows served from stored prefix blocks (-1: not reported).
  int reorder_before = -1, reorder_after = -1, stored_prefix_tokens = -1;
};

// StreamChat: POSTs `body` to http://127.0.0.1:port/v1/chat/completions and
// reads the stream to its end (or `timeout_s`).
StreamResult StreamChat(int port, const std::string& body, double timeout_s);

// ParseSseEvents: feeds `data` (bytes as they arrive) into `pending` and
// calls on_event with each complete event's data payload ("[DONE]" or a
// JSON text). Exposed for the stream parser's unit use.
template <typename F>
void ParseSseEvents(const char* data, size_t n, std::string* pending, F&& on_event) {
  pending->append(data, n);
  for (size_t end; (end = pending->find("\n\n")) != std::string::npos;) {
    const std::string event = pending->substr(0, end);
    pending->erase(0, end + 2);
    size_t at = 0;
    while (at < event.size()) {
      size_t eol = event.find('\n', at);
      if (eol == std::string::npos) eol = event.size();
      std::string line = event.substr(at, eol - at);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.rfind("data:", 0) == 0) {
        size_t p = 5;
        while (p < line.size() && line[p] == ' ') ++p;
        on_event(line.substr(p));
      }
      at = eol + 1;
    }
  }
}

}  // namespace ragkv::bench_serve

#endif  // RAGKV_BENCH_SERVE_CLIENT_H_
