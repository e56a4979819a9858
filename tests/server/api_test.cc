// api_test.cc: the HTTP API's parsing and response shapes (server/api.h),
// without llama.cpp: every refusal names its field, defaults clients send
// are accepted, responses carry OpenAI's fields.
#include "server/api.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace ragkv::server {
namespace {

using json = nlohmann::json;

ApiError ChatError(const std::string& body) {
  GenerationRequest r;
  ApiError e;
  EXPECT_FALSE(ParseChatRequest(body, &r, &e)) << body;
  return e;
}

std::string Chat(json extra) {
  json j = {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  if (extra.is_object()) j.update(extra);
  return j.dump();
}

TEST(ApiTest, RefusalsNameTheField) {
  EXPECT_EQ(ChatError("{nope").code, "invalid_json");
  EXPECT_EQ(ChatError("[1]").code, "invalid_json");
  EXPECT_EQ(ChatError(Chat({{"temperature", "hot"}})).param, "temperature");
  EXPECT_EQ(ChatError(Chat({{"temperature", 3}})).param, "temperature");
  EXPECT_EQ(ChatError(Chat({{"max_tokens", 0}})).param, "max_tokens");
  EXPECT_EQ(ChatError(Chat({{"max_tokens", 1.5}})).param, "max_tokens");
  EXPECT_EQ(ChatError(Chat({{"n", 2}})).param, "n");
  EXPECT_EQ(ChatError(Chat({{"logprobs", true}})).param, "logprobs");
  EXPECT_EQ(ChatError(Chat({{"top_logprobs", 2}})).param, "top_logprobs");
  EXPECT_EQ(ChatError(Chat({{"presence_penalty", 0.5}})).param, "presence_penalty");
  EXPECT_EQ(ChatError(Chat({{"tools", {{{"type", "function"}}}}})).param, "tools");
  EXPECT_EQ(ChatError(Chat({{"tool_choice", "auto"}})).param, "tool_choice");
  EXPECT_EQ(ChatError(Chat({{"response_format", {{"type", "json_object"}}}})).param,
            "response_format");
  EXPECT_EQ(ChatError(Chat({{"stop", {"a", "b", "c", "d", "e"}}})).param, "stop");
  EXPECT_EQ(ChatError(Chat({{"stop", 3}})).param, "stop");
  EXPECT_EQ(ChatError(Chat({{"messages", json::array()}})).param, "messages");
  EXPECT_EQ(ChatError(Chat({{"messages", {{{"role", "tool"}, {"content", "x"}}}}})).param,
            "messages[0].role");
  EXPECT_EQ(ChatError(Chat({{"messages",
                             {{{"role", "user"},
                               {"content", {{{"type", "image_url"}, {"image_url", {{"url", "x"}}}}}}}}}}))
                .param,
            "messages[0].content[0]");
  EXPECT_EQ(ChatError(Chat({{"documents", {{{"title", "t"}}}}})).param, "documents[0].text");
  EXPECT_EQ(ChatError(Chat({{"documents", {{{"id", -3}}}}})).param, "documents[0].id");
  EXPECT_EQ(ChatError(Chat({{"documents", {{{"id", ""}}}}})).param, "documents[0].id");
  EXPECT_EQ(ChatError(Chat({{"cache_salt", 7}})).param, "cache_salt");
  EXPECT_EQ(ChatError(Chat({{"cache_salt", std::string(kMaxSaltBytes + 1, 's')}})).param,
            "cache_salt");
  EXPECT_EQ(ChatError(Chat({{"ragkv", {{"mode", "fast"}}}})).param, "ragkv.mode");
  EXPECT_EQ(ChatError(Chat({{"ragkv", {{"selector", "nearest"}}}})).param, "ragkv.selector");
  EXPECT_EQ(ChatError(Chat({{"ragkv", {{"adaptive_mass", 1.5}}}})).param, "ragkv.adaptive_mass");
  EXPECT_EQ(ChatError(Chat({{"ragkv", {{"adaptive_mass", "high"}}}})).param, "ragkv.adaptive_mass");
  EXPECT_EQ(ChatError(Chat({{"ragkv", {{"adaptive_threshold", -1e-4}}}})).param,
            "ragkv.adaptive_threshold");
  EXPECT_EQ(ChatError(Chat({{"ragkv", {{"adaptive_budget", 1.5}}}})).param,
            "ragkv.adaptive_budget");
  EXPECT_EQ(ChatError(Chat({{"ragkv", {{"k", kMaxDocuments + 1}}}})).param, "ragkv.k");
  EXPECT_EQ(ChatError(Chat({{"ragkv", {{"k", -2}}}})).param, "ragkv.k");
  EXPECT_EQ(ChatError(Chat({{"logit_bias", {{"abc", 1}}}})).param, "logit_bias");
  EXPECT_EQ(ChatError(Chat({{"messages", {{{"role", "user"}, {"content", std::string("a\0b", 3)}}}}}))
                .param,
            "messages[0].content");
  json no_model = json::parse(Chat({}));
  no_model.erase("model");
  EXPECT_EQ(ChatError(no_model.dump()).param, "model");
  EXPECT_EQ(ChatError(std::string(kMaxBodyBytes + 1, ' ')).code, "body_too_large");
  // Every error is OpenAI's shape.
  const json e = json::parse(ErrorJson(ChatError(Chat({{"n", 3}}))));
  ASSERT_TRUE(e.contains("error"));
  for (const char* k : {"message", "type", "param", "code"}) EXPECT_TRUE(e["error"].contains(k)) << k;
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(e["error"]["code"].is_null());
}

// Documents by id (a catalogue document or chunk) and cache_salt parse.
TEST(ApiTest, DocumentsByIdAndCacheSalt) {
  GenerationRequest r;
  ApiError e;
  ASSERT_TRUE(ParseChatRequest(Chat({{"documents", {{{"id", "kite"}}, {{"id", 17}}}},
                                     {"cache_salt", "tenant-1"}}),
                               &r, &e))
      << e.message;
  ASSERT_EQ(r.documents.size(), 2u);
  EXPECT_TRUE(r.documents[0].by_id());
  EXPECT_EQ(r.documents[0].doc_id, "kite");
  EXPECT_EQ(r.documents[1].chunk_id, 17u);
  EXPECT_EQ(r.cache_salt, "tenant-1");
}

// ragkv.reorder (the exact-prefix reorder pass): a boolean, unset by
// default (the server's --reorder-documents decides); anything else is
// refused by name.
TEST(ApiTest, ReorderIsABoolean) {
  GenerationRequest r;
  ApiError e;
  ASSERT_TRUE(ParseChatRequest(Chat({}), &r, &e)) << e.message;
  EXPECT_FALSE(r.ragkv.reorder.has_value());
  for (bool on : {true, false}) {
    GenerationRequest q;
    ASSERT_TRUE(ParseChatRequest(Chat({{"ragkv", {{"reorder", on}}}}), &q, &e)) << e.message;
    ASSERT_TRUE(q.ragkv.reorder.has_value());
    EXPECT_EQ(*q.ragkv.reorder, on);
  }
  for (const json& bad : {json("yes"), json(1), json::array({true}), json::object()}) {
    const ApiError err = ChatError(Chat({{"ragkv", {{"reorder", bad}}}}));
    EXPECT_EQ(err.status, 400);
    EXPECT_EQ(err.param, "ragkv.reorder") << bad;
    EXPECT_EQ(err.message, "'reorder' must be a boolean") << bad;
  }
}

// The response's ragkv.reorder: what the pass did, only when it ran.
TEST(ApiTest, ResponsesSayWhatTheReorderDid) {
  Completion c;
  c.id = "chatcmpl-1";
  EXPECT_FALSE(json::parse(ChatResponseJson(c))["ragkv"].contains("reorder"));
  c.timing.reorder_ran = true;
  c.timing.reorder_prefix_before = 16;
  c.timing.reorder_prefix_after = 96;
  c.timing.document_order = {2, 0, 1};
  const json x = json::parse(ChatResponseJson(c))["ragkv"]["reorder"];
  EXPECT_EQ(x["prefix_tokens_before"], 16);
  EXPECT_EQ(x["prefix_tokens_after"], 96);
  EXPECT_EQ(x["document_order"], json::array({2, 0, 1}));
}

// POST /v1/documents bodies: ids and texts required, ids unique.
TEST(ApiTest, IngestBodies) {
  std::vector<Document> docs;
  ApiError e;
  ASSERT_TRUE(ParseIngestRequest(
      R"({"documents": [{"id": "a", "text": "x", "title": "T"}, {"id": "b", "text": "y"}]})", &docs,
      &e))
      << e.message;
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0].title, "T");
  EXPECT_EQ(docs[1].doc_id, "b");
  auto refused = [&](const std::string& body) {
    EXPECT_FALSE(ParseIngestRequest(body, &docs, &e)) << body;
    return e.param;
  };
  EXPECT_EQ(refused(R"({"documents": []})"), "documents");
  EXPECT_EQ(refused(R"({"documents": [{"text": "x"}]})"), "documents[0].id");
  EXPECT_EQ(refused(R"({"documents": [{"id": "a"}]})"), "documents[0].text");
  EXPECT_EQ(refused(R"({"documents": [{"id": "a", "text": "x", "title": 3}]})"),
            "documents[0].title");
  EXPECT_EQ(refused(R"({"documents": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]})"),
            "documents[1].id");
  EXPECT_EQ(refused("{nope"), "");
}

TEST(ApiTest, DefaultsClientsSendAreAccepted) {
  GenerationRequest r;
  ApiError e;
  ASSERT_TRUE(ParseChatRequest(
      Chat({{"n", 1}, {"presence_penalty", 0}, {"frequency_penalty", 0},
            {"response_format", {{"type", "text"}}}, {"user", "u"}, {"logprobs", false},
            {"tools", json::array()}, {"tool_choice", "none"}, {"stream", true},
            {"stream_options", {{"include_usage", true}}}, {"temperature", 0}, {"top_p", 0.9},
            {"seed", 7}, {"stop", "\n\n"}, {"max_completion_tokens", 12},
            {"documents", {{{"title", "T"}, {"text", "body"}}}},
            {"ragkv", {{"mode", "full"}, {"ratio", 0.5}, {"k", 3}, {"selector", "deviation"},
                       {"adaptive_mass", 0.95}, {"adaptive_threshold", 1.6e-4},
                       {"adaptive_budget", 0.1}}},
            {"logit_bias", {{"5", -100}}}}),
      &r, &e))
      << e.message;
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.sampling.temperature, 0);
  EXPECT_EQ(r.sampling.max_tokens, 12);
  ASSERT_TRUE(r.sampling.seed.has_value());
  EXPECT_EQ(*r.sampling.seed, 7u);
  ASSERT_EQ(r.sampling.stop.size(), 1u);
  ASSERT_EQ(r.documents.size(), 1u);
  EXPECT_EQ(r.documents[0].title, "T");
  EXPECT_EQ(r.ragkv.mode, "full");
  EXPECT_EQ(r.ragkv.k, 3);
  EXPECT_EQ(r.ragkv.selector, "deviation");
  EXPECT_DOUBLE_EQ(r.ragkv.adaptive_mass, 0.95);
  EXPECT_DOUBLE_EQ(r.ragkv.adaptive_threshold, 1.6e-4);
  EXPECT_DOUBLE_EQ(r.ragkv.adaptive_budget, 0.1);
  ASSERT_EQ(r.sampling.logit_bias.size(), 1u);
  EXPECT_EQ(r.sampling.logit_bias[0].first, 5);
}

TEST(ApiTest, ContentPartsAndDeveloperRole) {
  GenerationRequest r;
  ApiError e;
  ASSERT_TRUE(ParseChatRequest(
      Chat({{"messages",
             {{{"role", "developer"}, {"content", "sys"}},
              {{"role", "user"},
               {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}}}}}),
      &r, &e))
      << e.message;
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "ab");
}

TEST(ApiTest, CompletionPrompts) {
  GenerationRequest r;
  ApiError e;
  ASSERT_TRUE(ParseCompletionRequest(R"({"model":"m","prompt":"Once"})", &r, &e));
  EXPECT_FALSE(r.prompt_is_ids);
  EXPECT_EQ(r.prompt_text, "Once");
  ASSERT_TRUE(ParseCompletionRequest(R"({"model":"m","prompt":[1,2,3]})", &r, &e));
  EXPECT_TRUE(r.prompt_is_ids);
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  ASSERT_TRUE(ParseCompletionRequest(R"({"model":"m","prompt":["Once"]})", &r, &e));
  EXPECT_EQ(r.prompt_text, "Once");
  EXPECT_FALSE(ParseCompletionRequest(R"({"model":"m","prompt":["a","b"]})", &r, &e));
  EXPECT_EQ(e.param, "prompt");
  EXPECT_FALSE(ParseCompletionRequest(R"({"model":"m","prompt":[1,-2]})", &r, &e));
  EXPECT_EQ(e.param, "prompt");
  EXPECT_FALSE(ParseCompletionRequest(R"({"model":"m","prompt":"x","echo":true})", &r, &e));
  EXPECT_EQ(e.param, "echo");
  EXPECT_FALSE(ParseCompletionRequest(R"({"model":"m","prompt":"x","best_of":2})", &r, &e));
  EXPECT_EQ(e.param, "best_of");
}

TEST(ApiTest, ResponsesCarryOpenAiFields) {
  Completion c;
  c.id = "chatcmpl-1";
  c.created = 123;
  c.model = "m";
  c.text = "hello \xff";  // a byte that is not UTF-8 is replaced, never thrown
  c.finish_reason = "length";
  c.usage = {10, 2, 7};
  const json j = json::parse(ChatResponseJson(c));
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 10);
  EXPECT_EQ(j["usage"]["completion_tokens"], 2);
  EXPECT_EQ(j["usage"]["total_tokens"], 12);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 7);
  const std::string sse = ChatChunkSse(c, "x", false, "");
  ASSERT_EQ(sse.rfind("data: ", 0), 0u);
  ASSERT_EQ(sse.substr(sse.size() - 2), "\n\n");
  const json chunk = json::parse(sse.substr(6));
  EXPECT_EQ(chunk["object"], "chat.completion.chunk");
  EXPECT_EQ(chunk["choices"][0]["delta"]["content"], "x");
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  const json usage = json::parse(UsageChunkSse(c, true).substr(6));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 7);
  const json models = json::parse(ModelsJson("m", 1));
  EXPECT_EQ(models["data"][0]["id"], "m");
}

TEST(ApiTest, Utf8CompleteLengthHoldsCutSequences) {
  EXPECT_EQ(Utf8CompleteLength("abc"), 3u);
  EXPECT_EQ(Utf8CompleteLength("a\xc3"), 1u);             // é cut after its lead byte
  EXPECT_EQ(Utf8CompleteLength("a\xc3\xa9"), 3u);         // é whole
  EXPECT_EQ(Utf8CompleteLength("a\xe2\x82"), 1u);         // € cut
  EXPECT_EQ(Utf8CompleteLength("a\xf0\x9f\x98\x80"), 5u); // emoji whole
  EXPECT_EQ(Utf8CompleteLength(""), 0u);
}

}  // namespace
}  // namespace ragkv::server
