#include "bench/serve/client.h"

#include <httplib.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace ragkv::bench_serve {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// OnEvent: one `data:` payload into `r`; `done` set by [DONE].
void OnEvent(const std::string& data, Clock::time_point t0, StreamResult* r, bool* done) {
  if (data == "[DONE]") {
    *done = true;
    r->e2e_ms = MsSince(t0);
    return;
  }
  const json j = json::parse(data, nullptr, false);
  if (j.is_discarded()) {
    r->error = "unparsable chunk: " + data.substr(0, 200);
    return;
  }
  if (j.contains("error")) {
    r->error = "error event: " + j["error"].dump().substr(0, 300);
    return;
  }
  if (j.contains("usage") && j["usage"].is_object()) {
    const json& u = j["usage"];
    r->prompt_tokens = u.value("prompt_tokens", 0);
    r->completion_tokens = u.value("completion_tokens", 0);
    if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object()) {
      r->cached_tokens = u["prompt_tokens_details"].value("cached_tokens", 0);
    }
  }
  if (j.contains("ragkv") && j["ragkv"].is_object()) {
    const json& k = j["ragkv"];
    r->blend_ms = k.value("blend_ms", 0.0);
    r->prefill_ms = k.value("prefill_ms", 0.0);
    r->recomputed_tokens = k.value("recomputed_tokens", 0);
    r->prefilled_tokens = k.value("prefilled_tokens", 0);
    r->stored_prefix_tokens = k.value("stored_prefix_tokens", -1);
    if (k.contains("reorder") && k["reorder"].is_object()) {
      r->reorder_before = k["reorder"].value("prefix_tokens_before", -1);
      r->reorder_after = k["reorder"].value("prefix_tokens_after", -1);
    }
  }
  if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return;
  const json& delta = j["choices"][0].value("delta", json::object());
  if (!delta.contains("content") || !delta["content"].is_string()) return;
  const std::string content = delta["content"].get<std::string>();
  if (content.empty()) return;
  if (r->content_chunks++ == 0) {
    r->ttft_ms = MsSince(t0);
    r->first_content = content;
  }
}

}  // namespace

StreamResult StreamChat(int port, const std::string& body, double timeout_s) {
  StreamResult r;
  httplib::Client c("127.0.0.1", port);
  const auto t = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  c.set_connection_timeout(std::chrono::seconds(5));
  c.set_read_timeout(t);
  c.set_write_timeout(t);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.body = body;
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  std::string pending, raw;
  bool done = false;
  const Clock::time_point t0 = Clock::now();
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (raw.size() < 4096) raw.append(data, std::min<size_t>(n, 4096));
    ParseSseEvents(data, n, &pending, [&](const std::string& e) { OnEvent(e, t0, &r, &done); });
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent = c.send(req, res, err);
  if (!sent) {
    r.error = absl::StrCat("transport: ", httplib::to_string(err));
  } else if (res.status != 200) {
    r.error = absl::StrCat("HTTP ", res.status, ": ", raw.substr(0, 300));
  } else if (r.error.empty() && r.content_chunks == 0) {
    r.error = "no content in the stream";
  } else if (r.error.empty() && !done) {
    r.error = "the stream ended without [DONE]";
  }
  if (r.e2e_ms == 0) r.e2e_ms = MsSince(t0);
  r.ok = r.error.empty();
  return r;
}

}  // namespace ragkv::bench_serve
