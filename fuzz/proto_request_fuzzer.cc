// proto_request_fuzzer: the ragkv.v1 request handlers' validation
// (services/internal/validate.h) on untrusted bytes: the wire bytes are
// parsed as a request message (protobuf's parser is part of the attack
// surface) and run through the same validation the gRPC handlers call first.
// Input: [selector][flags][message bytes].
//   selector % kNumTypes picks the message type (list below);
//   flags bit 0-1: vocab_size 0 / 512 / 32000 / 1 for the token-id checks.
// PutChunk (a client stream) instead takes [u16 len][KVRecord bytes]...:
// each record goes through PutChunkAssembler::Add, then Finish and Encode.
// flags bit 2: recompute each layer's LayerKV.checksum, bit 3: set the
// header key to ChunkKey::Of(fingerprint, token_ids), so mutations reach the
// checks behind the checksum and the key binding.
// Invariants checked (abort on violation):
//  * validation is deterministic: re-serialising the parsed message,
//    parsing and validating it again gives the same status code;
//  * a PutChunk stream the assembler accepts encodes (kvstore's EncodeHeader
//    / EncodeLayer accept everything the validation let through), and the
//    encoded chunk decodes to the same key, fingerprint, tokens and shape,
//    with every layer record verifying and holding the sent K/V bytes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "connector/wire.h"
#include "fuzz/fuzz_util.h"
#include "google/protobuf/stubs/logging.h"
#include "kvstore/chunk_key.h"
#include "kvstore/kv_chunk.h"
#include "ragkv/v1/blend.pb.h"
#include "ragkv/v1/engine.pb.h"
#include "ragkv/v1/kvstore.pb.h"
#include "ragkv/v1/precompute.pb.h"
#include "ragkv/v1/retrieval.pb.h"
#include "services/internal/kv_wire.h"
#include "services/internal/validate.h"

namespace proto_request_fuzz {

namespace v1 = ragkv::v1;
namespace kv = ragkv::kvstore;
namespace vi = ragkv::services::internal;

enum Type : uint8_t {
  kGetChunk = 0,
  kLookup,
  kContains,
  kDeleteChunks,
  kPutChunk,
  kBlend,
  kRetrieveAndBlend,
  kIngest,
  kDeleteDocument,
  kSearch,
  kGetChunks,
  kGenerate,
  kChunkDocuments,
  kStartJob,  // appended: the stored regressions' selectors keep their types
  kNumTypes
};

void Check(bool cond, const char* what) {
  if (!cond) {
    std::fprintf(stderr, "proto_request_fuzzer invariant violated: %s\n", what);
    std::abort();
  }
}

int VocabOf(uint8_t flags) {
  static constexpr int kVocab[4] = {0, 512, 32000, 1};
  return kVocab[flags & 3];
}

// Validate: the handler-level validation of one parsed message of `type`.
absl::Status Validate(Type type, const google::protobuf::Message& m, int vocab) {
  switch (type) {
    case kGetChunk:
      return vi::ValidateGetChunkRequest(static_cast<const v1::GetChunkRequest&>(m));
    case kLookup:
      return vi::ValidateKeyList(static_cast<const v1::LookupRequest&>(m).keys());
    case kContains:
      return vi::ValidateKeyList(static_cast<const v1::ContainsRequest&>(m).keys());
    case kDeleteChunks:
      return vi::ValidateKeyList(static_cast<const v1::DeleteChunksRequest&>(m).keys());
    case kBlend:
      return vi::ValidateBlendRequest(static_cast<const v1::BlendRequest&>(m), vocab);
    case kRetrieveAndBlend:
      return vi::ValidateRetrieveAndBlendRequest(static_cast<const v1::RetrieveAndBlendRequest&>(m));
    case kIngest:
      return vi::ValidateIngestDocument(static_cast<const v1::IngestDocumentsRequest&>(m));
    case kDeleteDocument:
      return vi::ValidateDeleteDocumentRequest(static_cast<const v1::DeleteDocumentRequest&>(m));
    case kSearch:
      return vi::ValidateSearchRequest(static_cast<const v1::SearchRequest&>(m));
    case kGetChunks:
      return vi::ValidateGetChunksRequest(static_cast<const v1::GetChunksRequest&>(m));
    case kGenerate:
      return vi::ValidateGenerateRequest(static_cast<const v1::GenerateRequest&>(m), vocab);
    case kChunkDocuments:
      return vi::ValidateChunkDocumentsRequest(static_cast<const v1::ChunkDocumentsRequest&>(m));
    case kStartJob:
      return vi::ValidateStartJobRequest(static_cast<const v1::StartJobRequest&>(m));
    default:
      return absl::OkStatus();
  }
}

std::unique_ptr<google::protobuf::Message> NewMessage(Type type) {
  switch (type) {
    case kGetChunk: return std::make_unique<v1::GetChunkRequest>();
    case kLookup: return std::make_unique<v1::LookupRequest>();
    case kContains: return std::make_unique<v1::ContainsRequest>();
    case kDeleteChunks: return std::make_unique<v1::DeleteChunksRequest>();
    case kBlend: return std::make_unique<v1::BlendRequest>();
    case kRetrieveAndBlend: return std::make_unique<v1::RetrieveAndBlendRequest>();
    case kIngest: return std::make_unique<v1::IngestDocumentsRequest>();
    case kDeleteDocument: return std::make_unique<v1::DeleteDocumentRequest>();
    case kSearch: return std::make_unique<v1::SearchRequest>();
    case kGetChunks: return std::make_unique<v1::GetChunksRequest>();
    case kGenerate: return std::make_unique<v1::GenerateRequest>();
    case kChunkDocuments: return std::make_unique<v1::ChunkDocumentsRequest>();
    case kStartJob:
      return std::make_unique<v1::StartJobRequest>();
    default: return nullptr;
  }
}

void RunMessage(Type type, uint8_t flags, std::string_view bytes) {
  std::unique_ptr<google::protobuf::Message> m = NewMessage(type);
  if (!m->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return;
  const int vocab = VocabOf(flags);
  const absl::Status s = Validate(type, *m, vocab);
  // Determinism across a serialisation round trip.
  std::string again;
  Check(m->SerializeToString(&again), "a parsed message serialises");
  std::unique_ptr<google::protobuf::Message> m2 = NewMessage(type);
  Check(m2->ParseFromString(again), "a re-serialised message parses");
  Check(Validate(type, *m2, vocab).code() == s.code(), "validation is deterministic");
}

// RunPutChunk: one PutChunk stream through the assembler.
void RunPutChunk(uint8_t flags, ragkv::fuzz::FuzzInput& in) {
  // Flag bit 16: as a server with a model (the seeds' layout) and a small
  // in-flight budget, so mutations reach the expect and budget checks.
  vi::PutChunkExpect expect;
  expect.fingerprint[0] = 9;
  expect.num_layers = 2;
  expect.num_kv_heads = 2;
  expect.head_dim = 4;
  vi::ByteBudget budget(4096);
  vi::PutChunkAssembler::Options ao;
  if (flags & 16) {
    ao.expect = &expect;
    ao.budget = &budget;
    ao.max_chunk_bytes = 2048;
  }
  vi::PutChunkAssembler a(ao);
  std::vector<std::string> sent_k, sent_v;
  for (int n = 0; n < 64 && in.remaining() > 0; ++n) {
    const uint16_t len = in.U16();
    std::string_view rec_bytes = in.Take(len);
    v1::KVRecord rec;
    if (!rec.ParseFromArray(rec_bytes.data(), static_cast<int>(rec_bytes.size()))) return;
    if (rec.has_layer() && (flags & 4)) {
      rec.mutable_layer()->set_checksum(ragkv::wire::LayerChecksum(rec.layer().k(), rec.layer().v()));
    }
    if (rec.has_header() && (flags & 8) && rec.header().layout().model_fingerprint().size() == 16) {
      kv::Fingerprint fp;
      std::memcpy(fp.data(), rec.header().layout().model_fingerprint().data(), 16);
      std::vector<int32_t> toks(rec.header().token_ids().begin(), rec.header().token_ids().end());
      rec.mutable_header()->set_key(std::string(kv::ChunkKey::Of(fp, toks).AsBytes()));
    }
    std::string k, v;
    if (rec.has_layer()) {
      k = rec.layer().k();
      v = rec.layer().v();
    }
    const bool is_layer = rec.has_layer();
    if (!a.Add(std::move(rec)).ok()) return;  // the handler fails the call here
    if (is_layer) {
      sent_k.push_back(std::move(k));
      sent_v.push_back(std::move(v));
    }
  }
  absl::StatusOr<kv::KvChunkHeader> h = a.Finish();
  if (!h.ok()) return;
  absl::StatusOr<kv::EncodedChunk> enc = a.Encode();
  Check(enc.ok(), "a validated PutChunk stream encodes");
  if (flags & 16) {
    Check(h->fingerprint == expect.fingerprint && h->num_layers == expect.num_layers &&
              h->num_kv_heads == expect.num_kv_heads && h->head_dim == expect.head_dim,
          "a stream accepted under a served model has its layout");
    Check(budget.used() <= budget.limit(), "the budget holds");
  }
  absl::StatusOr<kv::KvChunkHeader> d = kv::DecodeHeader(enc->header);
  Check(d.ok(), "the encoded header decodes");
  Check(d->key == h->key && d->fingerprint == h->fingerprint && d->tokens == h->tokens &&
            d->num_layers == h->num_layers && d->num_kv_heads == h->num_kv_heads &&
            d->head_dim == h->head_dim && d->dtype == h->dtype,
        "the encoded header has the sent fields");
  Check(enc->layers.size() == d->num_layers && sent_k.size() == d->num_layers,
        "one record per layer");
  for (uint32_t i = 0; i < d->num_layers; ++i) {
    Check(kv::ParseLayerRecord(*d, enc->layers[i], i).ok(), "each layer record verifies");
    absl::StatusOr<kv::RawLayer> r = kv::RawLayerViews(*d, enc->layers[i], i);
    Check(r.ok(), "raw views of a raw record");
    const size_t bytes = sent_k[i].size();
    Check(std::memcmp(r->k.data, sent_k[i].data(), bytes) == 0 &&
              std::memcmp(r->v.data, sent_v[i].data(), bytes) == 0,
          "the stored K/V are the sent bytes");
  }
}

// WriteProtoSeeds: one valid request of every type (and a valid PutChunk
// stream), each with flags 0 and with the fix-up/vocab bits set.
void WriteProtoSeeds(const std::string& dir) {
  int n = 0;
  auto write = [&](Type t, uint8_t flags, const std::string& body) {
    std::string in;
    in.push_back(static_cast<char>(t));
    in.push_back(static_cast<char>(flags));
    in += body;
    ragkv::fuzz::WriteFile(dir + "/proto_seed_" + std::to_string(n++), in);
  };
  kv::Fingerprint fp{};
  fp[0] = 9;
  const std::vector<int32_t> toks = {1, 2, 3};
  const std::string key(kv::ChunkKey::Of(fp, toks).AsBytes());
  v1::GetChunkRequest g;
  g.set_key(key);
  g.set_model_fingerprint(std::string(fp.begin(), fp.end()));
  write(kGetChunk, 0, g.SerializeAsString());
  v1::LookupRequest l;
  l.add_keys(key);
  l.add_keys(std::string(16, 'x'));
  write(kLookup, 0, l.SerializeAsString());
  v1::ContainsRequest c;
  c.add_keys(key);
  write(kContains, 0, c.SerializeAsString());
  v1::DeleteChunksRequest dc;
  dc.add_keys(key);
  write(kDeleteChunks, 0, dc.SerializeAsString());
  // PutChunk: header + 2 layers of f16 [2 heads][3 tokens][4 dims].
  {
    std::string body;
    v1::KVRecord hr;
    v1::KVHeader* h = hr.mutable_header();
    h->set_key(key);
    h->mutable_token_ids()->Assign(toks.begin(), toks.end());
    v1::KVLayout* lay = h->mutable_layout();
    lay->set_num_layers(2);
    lay->set_num_kv_heads(2);
    lay->set_head_dim(4);
    lay->set_num_tokens(3);
    lay->set_dtype(v1::DTYPE_F16);
    lay->set_model_fingerprint(std::string(fp.begin(), fp.end()));
    body += ragkv::fuzz::U16Prefixed(hr.SerializeAsString());
    for (uint32_t i = 0; i < 2; ++i) {
      v1::KVRecord lr;
      v1::LayerKV* kvl = lr.mutable_layer();
      kvl->set_layer(i);
      std::string k(2 * 3 * 4 * 2, '\0'), v(2 * 3 * 4 * 2, '\0');
      for (size_t j = 0; j < k.size(); ++j) {
        k[j] = static_cast<char>((j * 7 + i) & 0x3b);  // finite f16 values
        v[j] = static_cast<char>((j * 13 + 5 * i) & 0x3b);
      }
      kvl->set_k(k);
      kvl->set_v(v);
      kvl->set_checksum(ragkv::wire::LayerChecksum(k, v));
      body += ragkv::fuzz::U16Prefixed(lr.SerializeAsString());
    }
    write(kPutChunk, 0, body);
    write(kPutChunk, 4 | 8, body);
  }
  v1::BlendRequest b;
  b.add_segments()->set_text("system");
  b.add_segments()->set_chunk_id(3);
  b.add_segments()->mutable_tokens()->mutable_ids()->Assign(toks.begin(), toks.end());
  b.mutable_options()->set_mode(v1::BLEND_MODE_CACHEBLEND);
  b.mutable_options()->set_recompute_ratio(0.15f);
  b.mutable_options()->set_output_dtype(v1::DTYPE_F16);
  write(kBlend, 0, b.SerializeAsString());
  write(kBlend, 1, b.SerializeAsString());
  v1::RetrieveAndBlendRequest rb;
  rb.set_query("who?");
  rb.set_k(3);
  rb.set_system_prompt("be brief");
  write(kRetrieveAndBlend, 0, rb.SerializeAsString());
  v1::IngestDocumentsRequest ig;
  ig.mutable_document()->set_doc_id("d1");
  ig.mutable_document()->set_text("Once upon a time.");
  write(kIngest, 0, ig.SerializeAsString());
  v1::DeleteDocumentRequest dd;
  dd.set_doc_id("d1");
  write(kDeleteDocument, 0, dd.SerializeAsString());
  v1::SearchRequest s;
  s.set_text("a query");
  s.set_k(5);
  write(kSearch, 0, s.SerializeAsString());
  v1::SearchRequest sv;
  sv.set_k(2);
  for (int i = 0; i < 8; ++i) sv.mutable_vector()->add_values(0.125f * i);
  write(kSearch, 0, sv.SerializeAsString());
  v1::GetChunksRequest gc;
  gc.add_chunk_ids(1);
  gc.add_chunk_ids(2);
  write(kGetChunks, 0, gc.SerializeAsString());
  v1::GenerateRequest ge;
  ge.set_question("who?");
  ge.add_question_tokens(5);
  ge.set_k(2);
  ge.set_max_new_tokens(8);
  ge.mutable_blend()->set_mode(v1::BLEND_MODE_FULL_REUSE);
  write(kGenerate, 1, ge.SerializeAsString());
  v1::StartJobRequest sj;
  sj.mutable_corpus()->add_paths("docs");
  sj.mutable_corpus()->set_shard_index(1);
  sj.mutable_corpus()->set_shard_count(2);
  sj.mutable_corpus()->set_neighbours(2);
  sj.set_workers(2);
  write(kStartJob, 0, sj.SerializeAsString());
}

}  // namespace proto_request_fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Protobuf logs every string field with invalid UTF-8 it refuses to parse
  // (a common mutation): silence it, the parse result is what matters.
  google::protobuf::SetLogHandler(nullptr);
  if (std::string d = ragkv::fuzz::SeedDir(); !d.empty()) {
    proto_request_fuzz::WriteProtoSeeds(d);
    std::exit(0);  // seed mode only (scripts/fuzz)
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace proto_request_fuzz;
  ragkv::fuzz::FuzzInput in(data, size);
  const Type type = static_cast<Type>(in.Byte() % kNumTypes);
  const uint8_t flags = in.Byte();
  if (type == kPutChunk) {
    RunPutChunk(flags, in);
  } else {
    RunMessage(type, flags, in.Rest());
  }
  return 0;
}
