#include "services/bench_ttft.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "blend/bench_quality.h"
#include "blend/kv_source.h"
#include "blend/loading_controller.h"
#include "blend/store_source.h"
#include "kvstore/ram_tier.h"
#include "kvstore/redis_server_process.h"
#include "kvstore/redis_tier.h"
#include "kvstore/ssd_tier.h"
#include "kvstore/tiered_store.h"
#include "model/loader.h"
#include "model/tokenizer.h"
#include "retrieval/corpus_reader.h"
#include "services/bench_ttft_grpc.h"
#include "services/plan_cmd.h"

namespace ragkv::services {

double Percentile(std::vector<double> s, double q) {
  if (s.empty()) return 0;
  std::sort(s.begin(), s.end());
  q = std::clamp(q, 0.0, 1.0);
  const double h = (static_cast<double>(s.size()) - 1) * q;
  const size_t lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, s.size() - 1);
  return s[lo] + (h - static_cast<double>(lo)) * (s[hi] - s[lo]);
}

LatencySummary Summarize(const std::vector<double>& s) {
  LatencySummary r;
  r.count = s.size();
  if (s.empty()) return r;
  double sum = 0;
  for (double x : s) sum += x;
  r.mean = sum / static_cast<double>(s.size());
  r.min = *std::min_element(s.begin(), s.end());
  r.max = *std::max_element(s.begin(), s.end());
  r.p50 = Percentile(s, 0.50);
  r.p95 = Percentile(s, 0.95);
  r.p99 = Percentile(s, 0.99);
  return r;
}

namespace {

using blend::BlendOptions;
using blend::BlendResult;
using blend::BlendSegment;
using blend::SegmentKind;
using blend::Strategy;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Prompt {
  std::vector<std::vector<int32_t>> chunks;
  std::vector<int32_t> query;
  std::vector<kvstore::ChunkKey> keys;
  std::vector<std::string> texts;     // gRPC path: one document per chunk
  std::vector<CatalogueChunk> cat;    // gRPC path: the first sidecar's chunks
  std::map<std::string, std::vector<CatalogueChunk>> cat_by_tier;  // each sidecar's
};

// ---- Cold page cache -------------------------------------------------------

// FadviseTree: POSIX_FADV_DONTNEED on every regular file under `dir`.
int FadviseTree(const std::string& dir) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir, ec)) {
    if (!e.is_regular_file(ec)) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::fdatasync(fd);
    if (::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0) ++n;
    ::close(fd);
  }
  return n;
}

bool DropCachesGlobally() {
  ::sync();
  const int fd = ::open("/proc/sys/vm/drop_caches", O_WRONLY);
  if (fd < 0) return false;
  const bool ok = ::write(fd, "1", 1) == 1;
  ::close(fd);
  return ok;
}

// ---- Tier stores -----------------------------------------------------------

struct TierStore {
  std::string name;   // "ram", "ssd", "redis"
  blend::Tier tier = blend::Tier::kRam;
  std::shared_ptr<kvstore::TieredStore> store;
  std::string dir;    // ssd: RocksDB directory
  double probe_bytes_per_s = 0;  // measured effective load bandwidth (open + read)
  double probe_open_s = 0;       // per chunk, opening a whole prompt's streams
  double probe_single_open_s = 0;  // opening one chunk's stream alone
  double probe_read_bytes_per_s = 0;  // reading + decoding its layers
};

// ---- One request -----------------------------------------------------------

struct Request {
  Strategy strategy = Strategy::kCacheBlend;
  bool controller = false;
  double ratio = 0;
  TierStore* tier = nullptr;  // null: full prefill (no KV)
  int chunks = -1;            // use the first n chunks (-1: all)
};

struct Outcome {
  double ttft_s = 0, open_s = 0, ratio = 0;
  uint64_t kv_bytes = 0;
  int64_t recomputed = 0, context = 0;
  blend::StageTimings stages;
  std::vector<size_t> tier_index;  // per opened source: the tier that served it
};

absl::StatusOr<Outcome> RunRequest(const blend::Blender& blender,
                                   blend::LoadingController* controller,
                                   const model::Model& model, const Prompt& p, const Request& rq) {
  const int n = rq.chunks < 0 ? static_cast<int>(p.chunks.size()) : rq.chunks;
  Outcome o;
  const double t0 = Now();
  std::vector<std::unique_ptr<blend::StoreKvSource>> sources(n);
  if (rq.tier != nullptr) {
    // Prefix caching reads only the leading chunk; the rest is prefilled.
    const int to_open = rq.strategy == Strategy::kPrefixReuse ? 1 : n;
    for (int i = 0; i < to_open; ++i) {
      ASSIGN_OR_RETURN(sources[i], blend::StoreKvSource::Open(rq.tier->store.get(), p.keys[i],
                                                              model.fingerprint()));
      if (sources[i] == nullptr) {
        return absl::InternalError(absl::StrCat("bench ttft: chunk ", i, " missing from tier ",
                                                rq.tier->name));
      }
    }
  }
  o.open_s = Now() - t0;
  std::vector<BlendSegment> segs;
  for (int i = 0; i < n; ++i) {
    segs.push_back({SegmentKind::kChunk, p.chunks[i], sources[i].get()});
    o.context += static_cast<int64_t>(p.chunks[i].size());
  }
  segs.push_back({SegmentKind::kQuery, p.query, nullptr});
  std::optional<BlendResult> result;
  if (rq.controller) {
    ASSIGN_OR_RETURN(blend::ControlledBlend cb, controller->Blend(segs, {rq.tier->tier}));
    o.ratio = cb.decision.ratio;
    result.emplace(std::move(cb.result));
  } else {
    BlendOptions bo;
    bo.strategy = rq.strategy;
    bo.ratio = rq.ratio;
    bo.overlap_loading = rq.tier != nullptr;
    o.ratio = rq.strategy == Strategy::kCacheBlend ? rq.ratio : 0;
    ASSIGN_OR_RETURN(BlendResult r, blender.Blend(segs, bo));
    result.emplace(std::move(r));
  }
  o.ttft_s = Now() - t0;
  o.stages = result->timings;
  for (const auto& rows : result->recomputed) o.recomputed += static_cast<int64_t>(rows.size());
  for (const auto& s : sources) {
    if (s == nullptr) continue;
    o.kv_bytes += s->bytes_read();
    o.tier_index.push_back(s->tier_index());
  }
  return o;
}

std::string StrategyLabel(const std::string& strategy, double ratio) {
  if (strategy == "blend") return absl::StrFormat("blend r=%.2f", ratio);
  return strategy;
}

// Zipf(s) sampler over [0, n).
class Zipf {
 public:
  Zipf(int n, double s) {
    double sum = 0;
    for (int i = 1; i <= n; ++i) cdf_.push_back(sum += 1.0 / std::pow(i, s));
    for (double& c : cdf_) c /= sum;
  }
  int operator()(std::mt19937_64& rng) const {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    return static_cast<int>(std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
  }

 private:
  std::vector<double> cdf_;
};

std::string Ms(double s) { return absl::StrFormat("%.0f", s * 1e3); }

// RunGnuplot: writes `script` next to the PNG and runs gnuplot on it.
absl::Status RunGnuplot(const std::string& dir, const std::string& name, const std::string& script) {
  const std::string path = dir + "/" + name + ".gp";
  {
    std::ofstream f(path);
    f << script;
    if (!f) return absl::InternalError("cannot write " + path);
  }
  const std::string cmd = absl::StrCat("gnuplot '", path, "' 2>'", dir, "/", name, ".log'");
  if (std::system(cmd.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("gnuplot failed on ", path, " (see ", name, ".log)"));
  }
  return absl::OkStatus();
}

std::string Terminal() {
  static const std::string t =
      std::system("gnuplot -e 'set terminal pngcairo' >/dev/null 2>&1") == 0 ? "pngcairo" : "png";
  return t;
}

}  // namespace

absl::StatusOr<TtftReport> RunTtftBench(const TtftBenchOptions& o, std::ostream& out) {
  if (o.prompts <= 0 || o.chunks <= 0 || o.chunk_tokens <= 0 || o.query_tokens <= 0 ||
      o.repeats <= 0 || o.load_requests < 0) {
    return absl::InvalidArgumentError("bench ttft: counts must be positive");
  }
  for (double r : o.ratios) {
    if (!(r >= 0 && r <= 1)) return absl::InvalidArgumentError("bench ttft: ratios in [0, 1]");
  }
  if (o.path != "inproc" && o.path != "grpc" && o.path != "both") {
    return absl::InvalidArgumentError("bench ttft: path must be inproc, grpc or both");
  }
  const bool with_grpc = o.path != "inproc";
  const bool with_inproc = o.path != "grpc";
  if (with_grpc && o.kv_dtype != kernels::DType::kF16) {
    // The sidecar loads its model with the default f16 KV.
    return absl::InvalidArgumentError("bench ttft: the gRPC path needs --kv-dtype f16");
  }
  TtftReport rep;
  model::LoadOptions lo;
  lo.kv_dtype = o.kv_dtype;
  lo.max_seq_len = o.max_seq_len;
  ASSIGN_OR_RETURN(auto model, model::LoadModel(o.model_spec, lo));
  ASSIGN_OR_RETURN(auto blender, blend::Blender::Create({model.get()}));
  const int vocab = model->config().vocab_size;
  std::mt19937 rng(static_cast<uint32_t>(o.seed));
  std::uniform_int_distribution<int> tok(3, vocab - 1);

  // Scratch directory.
  std::string work = o.work_dir;
  bool own_work = false;
  if (work.empty()) {
    char tmpl[] = "/tmp/ragkv-ttft-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) return absl::InternalError("mkdtemp failed");
    work = tmpl;
    own_work = true;
  }
  std::filesystem::create_directories(work);
  struct Cleanup {
    std::string dir;
    bool own;
    ~Cleanup() {
      std::error_code ec;
      if (own) std::filesystem::remove_all(dir, ec);
    }
  } cleanup{work, own_work};


  // ---- Prompts ----
  std::vector<Prompt> prompts;
  std::string workload;
  if (!o.corpus.empty()) {
    std::unique_ptr<model::Tokenizer> tk;
    if (!o.tokenizer.empty()) {
      ASSIGN_OR_RETURN(tk, model::LoadTokenizer(o.tokenizer));
    } else if (absl::StartsWith(o.model_spec, "synthetic:")) {
      ASSIGN_OR_RETURN(tk, model::MakeByteTokenizer(vocab));
    } else {
      ASSIGN_OR_RETURN(tk, model::LoadTokenizer(o.model_spec));
    }
    ASSIGN_OR_RETURN(retrieval::Corpus corpus,
                     retrieval::ReadCorpusFile(o.corpus, retrieval::CorpusFormat::kMusique));
    std::unordered_map<std::string, const retrieval::Document*> docs;
    for (const auto& d : corpus.documents) docs[d.id] = &d;
    for (const auto& q : corpus.questions) {
      if (static_cast<int>(prompts.size()) >= o.prompts) break;
      if (static_cast<int>(q.passage_doc_ids.size()) < o.chunks) continue;
      Prompt p;
      for (int i = 0; i < o.chunks; ++i) {
        auto it = docs.find(q.passage_doc_ids[i]);
        if (it == docs.end()) break;
        ASSIGN_OR_RETURN(auto ids, tk->Encode(it->second->text, false, false));
        if (ids.empty()) break;
        if (static_cast<int>(ids.size()) > o.chunk_tokens) ids.resize(o.chunk_tokens);
        p.chunks.push_back(std::move(ids));
        p.texts.push_back(it->second->text);
      }
      if (static_cast<int>(p.chunks.size()) != o.chunks) continue;
      ASSIGN_OR_RETURN(p.query, tk->Encode(q.question, false, false));
      if (p.query.empty()) continue;
      if (static_cast<int>(p.query.size()) > o.query_tokens) p.query.resize(o.query_tokens);
      prompts.push_back(std::move(p));
    }
    if (prompts.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bench ttft: no question in ", o.corpus, " has ", o.chunks, " passages"));
    }
    workload = absl::StrFormat("corpus %s: %d questions, top-%d passages cut to %d tokens",
                               o.corpus, prompts.size(), o.chunks, o.chunk_tokens);
  } else {
    for (int i = 0; i < o.prompts; ++i) {
      Prompt p;
      p.chunks.resize(o.chunks);
      for (int ci = 0; ci < o.chunks; ++ci) {
        auto& c = p.chunks[ci];
        if (with_grpc) {
          // Text the sidecar ingests; the tokens come from its catalogue.
          p.texts.push_back(SyntheticChunkText(
              o.chunk_tokens, o.seed * 1000003 + static_cast<uint64_t>(i) * 1024 + ci));
          continue;
        }
        c.resize(o.chunk_tokens);
        for (auto& t : c) t = tok(rng);
      }
      p.query.resize(o.query_tokens);
      for (auto& t : p.query) t = tok(rng);
      prompts.push_back(std::move(p));
    }
    workload = absl::StrFormat("synthetic: %d prompts x (%d chunks x %d tokens + %d query)",
                               o.prompts, o.chunks, o.chunk_tokens, o.query_tokens);
  }


  // ---- Tiers ----
  std::vector<std::unique_ptr<TierStore>> tiers;
  std::unique_ptr<kvstore::RedisServerProcess> redis;  // private redis-server
  std::string cold = o.ssd_cold;
  for (const std::string& name : o.tiers) {
    auto ts = std::make_unique<TierStore>();
    ts->name = name;
    std::shared_ptr<kvstore::Tier> tier;
    if (name == "ram") {
      ts->tier = blend::Tier::kRam;
      kvstore::RamTierOptions ro;
      ro.capacity_bytes = uint64_t{8} << 30;
      ASSIGN_OR_RETURN(tier, kvstore::CreateRamTier(ro));
    } else if (name == "ssd") {
      ts->tier = blend::Tier::kSsd;
      ts->dir = work + "/ssd";
      kvstore::SsdTierOptions so;
      so.path = ts->dir;
      so.sync_writes = false;
      // auto: targeted fadvise on the DB files (always permitted, leaves the
      // rest of the machine's page cache alone); "drop" is the global hammer.
      if (cold == "auto") cold = "fadvise";
      if (cold == "drop" && !DropCachesGlobally()) {
        rep.notes.push_back("drop_caches not permitted: falling back to fadvise");
        cold = "fadvise";
      }
      so.use_direct_reads = cold == "direct";
      ASSIGN_OR_RETURN(tier, kvstore::CreateSsdTier(so));
    } else if (name == "redis") {
      ts->tier = blend::Tier::kRemote;
      std::string endpoint = o.redis;
      if (endpoint.empty()) {
        if (!kvstore::RedisServerOnPath()) {
          rep.notes.push_back("redis tier skipped: redis-server not on PATH and --redis not given");
          continue;
        }
        absl::StatusOr<std::unique_ptr<kvstore::RedisServerProcess>> started =
            kvstore::RedisServerProcess::Start({"--maxmemory", "0"});
        if (!started.ok()) {
          rep.notes.push_back("redis tier skipped: " + started.status().ToString());
          continue;
        }
        redis = *std::move(started);
        endpoint = redis->endpoint();
        rep.notes.push_back("redis tier: private redis-server on " + endpoint);
      }
      kvstore::RedisTierOptions ro;
      ro.endpoints = {endpoint};
      ASSIGN_OR_RETURN(tier, kvstore::CreateRedisTier(ro));
    } else {
      return absl::InvalidArgumentError("bench ttft: unknown tier '" + name +
                                        "' (ram, ssd, redis)");
    }
    kvstore::TieredStoreOptions tso;
    tso.promote_on_hit = false;
    ASSIGN_OR_RETURN(ts->store, kvstore::TieredStore::Create(tso, {tier}));
    tiers.push_back(std::move(ts));
  }
  if (std::find(o.tiers.begin(), o.tiers.end(), "ssd") != o.tiers.end()) {
    rep.notes.push_back(
        "ssd cold reads: " +
        std::string(cold == "drop"      ? "echo 1 > /proc/sys/vm/drop_caches before every SSD request"
                    : cold == "fadvise" ? "posix_fadvise(DONTNEED) on the RocksDB files before "
                                          "every SSD request"
                    : cold == "direct"  ? "O_DIRECT reads (RocksDB use_direct_reads)"
                                        : "none (page cache warm)"));
  }
  // ---- The real path: one sidecar per tier on loopback ----
  // Each sidecar keeps its chunks in exactly one KV tier (SidecarOptions::
  // kv_tiers), so its Blend reads from that tier: RAM; SSD (O_DIRECT, the
  // sidecar default, plus fadvise of its files before each request); the
  // same Redis server as the in-process rows.
  std::map<std::string, std::unique_ptr<GrpcTtftPath>> grpc;
  if (with_grpc) {
    for (const auto& t : tiers) {
      GrpcTtftOptions go;
      go.model_spec = o.model_spec;
      go.tokenizer = o.tokenizer;
      go.max_seq_len = o.max_seq_len;
      go.chunk_tokens = o.chunk_tokens;
      go.data_dir = work + "/sidecar-" + t->name;
      go.kv_tiers = {t->name};
      if (t->name == "redis") go.redis_url = redis != nullptr ? redis->endpoint() : o.redis;
      ASSIGN_OR_RETURN(grpc[t->name], GrpcTtftPath::Start(go));
      rep.notes.push_back("grpc path, " + t->name + " tier: client -> EngineService.Generate on " +
                          grpc[t->name]->address() +
                          " -> reference engine -> BlendService (loopback gRPC), fused f16 KV "
                          "streamed into the engine's cache, last query token forward, first "
                          "token; the sidecar's only KV tier is " + t->name);
    }
    if (grpc.empty()) {
      // Full prefill needs no tier: one sidecar with RAM.
      GrpcTtftOptions go;
      go.model_spec = o.model_spec;
      go.tokenizer = o.tokenizer;
      go.max_seq_len = o.max_seq_len;
      go.chunk_tokens = o.chunk_tokens;
      go.data_dir = work + "/sidecar-ram";
      ASSIGN_OR_RETURN(grpc["ram"], GrpcTtftPath::Start(go));
    }
    // Ingest every chunk as a document into each sidecar; both paths then
    // use the catalogue's tokens (identical prompts; every sidecar's
    // tokenizer and chunker are the same, checked).
    for (size_t pi = 0; pi < prompts.size(); ++pi) {
      Prompt& p = prompts[pi];
      for (auto& [name, path] : grpc) {
        ASSIGN_OR_RETURN(std::vector<CatalogueChunk> cat,
                         path->Ingest(p.texts, absl::StrCat("ttft-p", pi, "-c")));
        for (size_t ci = 0; ci < cat.size(); ++ci) {
          if (p.cat.empty()) {
            p.chunks[ci] = cat[ci].tokens;
          } else if (p.chunks[ci] != cat[ci].tokens) {
            return absl::InternalError("bench ttft: sidecars chunked a text differently");
          }
        }
        if (p.cat.empty()) p.cat = cat;
        p.cat_by_tier[name] = std::move(cat);
      }
    }
  }
  // The sidecar that serves a gRPC row of `tier` (null: none), and the one
  // full prefill goes through (no tier: RAM's, else the first).
  auto grpc_for = [&](const TierStore* t) -> GrpcTtftPath* {
    if (grpc.empty()) return nullptr;
    if (t == nullptr) return grpc.count("ram") ? grpc["ram"].get() : grpc.begin()->second.get();
    auto it = grpc.find(t->name);
    return it == grpc.end() ? nullptr : it->second.get();
  };

  auto make_cold = [&](TierStore* t) {
    if (t == nullptr || t->name != "ssd") return;
    if (cold == "drop") {
      if (!DropCachesGlobally()) FadviseTree(t->dir);
    } else if (cold == "fadvise") {
      FadviseTree(t->dir);
    }
  };

  // ---- Precompute + store (the precompute times calibrate the planner) ----
  double best_chunk_prefill_s = 1e30;
  int64_t best_chunk_tokens = 0;
  for (Prompt& p : prompts) {
    for (size_t ci = 0; ci < p.chunks.size(); ++ci) {
      const auto& c = p.chunks[ci];
      const double t0 = Now();
      ASSIGN_OR_RETURN(blend::ChunkKV kv, blend::PrecomputeChunk(*model, c));
      const double dt = Now() - t0;
      if (static_cast<int64_t>(c.size()) >= best_chunk_tokens) {
        if (static_cast<int64_t>(c.size()) > best_chunk_tokens) best_chunk_prefill_s = 1e30;
        best_chunk_tokens = static_cast<int64_t>(c.size());
        best_chunk_prefill_s = std::min(best_chunk_prefill_s, dt);
      }
      ASSIGN_OR_RETURN(blend::StoreChunk sc, blend::EncodeForStore(kv));
      for (auto& t : tiers) RETURN_IF_ERROR(t->store->Put(sc.key, sc.chunk));
      p.keys.push_back(sc.key);
      for (auto& [name, path] : grpc) RETURN_IF_ERROR(path->Put(p.cat_by_tier[name][ci], kv));
    }
  }
  for (auto& t : tiers) RETURN_IF_ERROR(t->store->Flush());

  // ---- Calibration: CPU ceilings, tier probes, prefill efficiency ----
  const blend::ModelShape shape = blend::ShapeOf(*model);
  const int64_t context_tokens = [&] {
    int64_t c = 0;
    for (const auto& ch : prompts[0].chunks) c += static_cast<int64_t>(ch.size());
    return c;
  }();
  const int64_t query_tokens = static_cast<int64_t>(prompts[0].query.size());
  // The kernels of one layer of this model, at this request's sizes: the
  // GEMM table spans 1 row (logits) to the whole prompt; attention over the
  // context; the allocation of this prompt's fused f32 cache.
  CpuMeasureOptions cmo = o.calibration;
  cmo.scratch_dir = work;
  cmo.model = shape;
  cmo.attention_keys = static_cast<int>(std::max<int64_t>(64, context_tokens));
  cmo.attention_rows = static_cast<int>(std::min<int64_t>(256, cmo.attention_keys));
  cmo.alloc_bytes = static_cast<size_t>(2) * shape.layers * shape.kv_heads * shape.head_dim *
                    static_cast<size_t>(context_tokens + query_tokens) * sizeof(float);
  if (o.calibration.gemm_rows == CpuMeasureOptions{}.gemm_rows) {
    cmo.gemm_rows = {1, 8, 32, 128, 512};
    cmo.gemm_rows.push_back(static_cast<int>(context_tokens + query_tokens));
  }
  ASSIGN_OR_RETURN(CpuCeilings ceilings, MeasureCpu(cmo));
  for (auto& t : tiers) {
    // Probe: stream one chunk through the real load path (open, read every
    // layer, decode to f32), cold for SSD.
    const auto& info_chunk = prompts[0].chunks[0];
    std::vector<float> k(static_cast<size_t>(shape.kv_heads) * info_chunk.size() * shape.head_dim);
    std::vector<float> v(k.size());
    double best = 1e30, best_open = 1e30, best_read = 1e30;
    uint64_t bytes = 0;
    for (int r = 0; r < 2; ++r) {
      make_cold(t.get());
      const double t0 = Now();
      ASSIGN_OR_RETURN(auto src, blend::StoreKvSource::Open(t->store.get(), prompts[0].keys[0],
                                                            model->fingerprint()));
      if (src == nullptr) return absl::InternalError("bench ttft: probe chunk missing");
      const double t_open = Now();
      best_open = std::min(best_open, t_open - t0);
      const int64_t ntok = static_cast<int64_t>(info_chunk.size());
      for (int l = 0; l < shape.layers; ++l) {
        RETURN_IF_ERROR(src->ReadLayer(
            l,
            kernels::TensorView::Contiguous(k.data(), kernels::DType::kF32,
                                            {shape.kv_heads, ntok, shape.head_dim}),
            kernels::TensorView::Contiguous(v.data(), kernels::DType::kF32,
                                            {shape.kv_heads, ntok, shape.head_dim})));
      }
      best = std::min(best, Now() - t0);
      best_read = std::min(best_read, Now() - t_open);
      bytes = src->bytes_read();
    }
    // Opening, as a request does it: every chunk of a prompt in turn, each
    // Open starting a producer that streams its chunk while the next ones
    // open (so the opens share the CPU with that streaming); cold for SSD.
    // Per chunk, best of 2. The single open above (best_open) is reported.
    double best_all = 1e30;
    for (int r = 0; r < 2; ++r) {
      make_cold(t.get());
      std::vector<std::unique_ptr<blend::StoreKvSource>> all;
      const double t0 = Now();
      for (const auto& key : prompts[0].keys) {
        ASSIGN_OR_RETURN(auto src, blend::StoreKvSource::Open(t->store.get(), key,
                                                              model->fingerprint()));
        if (src == nullptr) return absl::InternalError("bench ttft: probe chunk missing");
        all.push_back(std::move(src));
      }
      best_all = std::min(best_all, Now() - t0);
    }
    // Bandwidth in the cost model's unit: KV bytes of the store's dtype.
    t->probe_bytes_per_s = static_cast<double>(bytes) / best;
    t->probe_single_open_s = best_open;
    t->probe_open_s = best_all / static_cast<double>(std::max<size_t>(1, prompts[0].keys.size()));
    t->probe_read_bytes_per_s = static_cast<double>(bytes) / best_read;
  }
  // raw: the pure roofline (sgemm peak, memcpy / file-read bandwidths).
  CpuCeilings roof = ceilings;
  roof.gemm_flops_at_rows.clear();
  roof.attention_flops = roof.row_op_bytes_per_s = roof.rerotate_bytes_per_s =
      roof.alloc_bytes_per_s = 0;
  blend::HardwareSpec raw_hw = CpuHardwareSpec(roof, 1.0);
  for (auto& t : tiers) {
    if (t->tier == blend::Tier::kRemote) raw_hw.remote_tier_bw = t->probe_bytes_per_s;
  }
  const blend::CostModel raw_cm(shape, raw_hw);
  const double raw_chunk_s = raw_cm.FullPrefillSeconds(best_chunk_tokens, 0);
  rep.efficiency = raw_chunk_s / best_chunk_prefill_s;
  // calibrated: the measured kernel rates (nothing fitted to a TTFT) and
  // each tier's probed load bandwidth.
  blend::HardwareSpec cal = CpuHardwareSpec(ceilings, 1.0);
  cal.name = "cpu-calibrated";
  for (auto& t : tiers) {
    double* bw = t->tier == blend::Tier::kRam   ? &cal.ram_tier_bw
                 : t->tier == blend::Tier::kSsd ? &cal.ssd_tier_bw
                                                : &cal.remote_tier_bw;
    // The calibrated model counts the stream opening (before the blend)
    // and the layer reads (overlapped) separately.
    *bw = t->probe_read_bytes_per_s;
    cal.tier_open_s[static_cast<int>(t->tier)] = t->probe_open_s;
  }
  out << absl::StrFormat(
      "# bench ttft: %s, %s, KV %s, %d repeats\n"
      "# cpu: sgemm %.1f GFLOP/s (n=%d), memcpy %.2f GB/s, cold file read %.2f GB/s; "
      "prefill of %d tokens %.3f s = %.0f%% of the sgemm roofline\n",
      o.model_spec, workload, kernels::DTypeName(o.kv_dtype), o.repeats,
      ceilings.sgemm_flops / 1e9, ceilings.gemm_n, ceilings.copy_bytes_per_s / 1e9,
      ceilings.file_read_bytes_per_s / 1e9, best_chunk_tokens, best_chunk_prefill_s,
      rep.efficiency * 100);
  out << "# kernels: " << DescribeKernelRates(ceilings) << "\n";
  for (auto& t : tiers) {
    out << absl::StrFormat(
        "# tier %s: probe load %.2f GB/s (open + read + decode one chunk; open %.2f ms, "
        "read + decode %.2f GB/s); opening a prompt's %d streams: %.2f ms per chunk\n",
        t->name, t->probe_bytes_per_s / 1e9, t->probe_single_open_s * 1e3,
        t->probe_read_bytes_per_s / 1e9, static_cast<int>(prompts[0].keys.size()),
        t->probe_open_s * 1e3);
  }
  for (const auto& n : rep.notes) out << "# " << n << "\n";

  std::unique_ptr<blend::LoadingController> controller;
  if (o.with_controller && !tiers.empty()) {
    blend::ControllerOptions co;
    co.model = model.get();
    co.r_min = std::min(o.r_min, 0.5);
    co.r_max = 0.5;
    for (auto& t : tiers) co.tier_bytes_per_s[static_cast<int>(t->tier)] = t->probe_bytes_per_s;
    absl::StatusOr<std::unique_ptr<blend::LoadingController>> c =
        blend::LoadingController::Create(co);
    if (c.ok()) {
      controller = *std::move(c);
    } else {
      rep.notes.push_back("controller strategy skipped: " + c.status().ToString());
      out << "# controller strategy skipped: " << c.status() << "\n";
    }
  }

  // ---- Matrix: every strategy x tier, interleaved per prompt ----
  struct Config {
    std::string strategy;
    Request rq;
    bool grpc = false;  // the real path, through the sidecar of rq.tier
  };
  std::vector<Config> configs;
  // Each gRPC row runs right after its in-process twin (same strategy, same
  // tier); the controller's gRPC row is BLEND_MODE_AUTO (the sidecar's own
  // loading controller).
  auto add = [&](const std::string& strategy, const Request& rq) {
    if (with_inproc || rq.tier == nullptr) configs.push_back({strategy, rq, false});
    if (grpc_for(rq.tier) != nullptr) configs.push_back({strategy, rq, true});
  };
  add("full-prefill", Request{Strategy::kFullPrefill, false, 0, nullptr, -1});
  for (auto& t : tiers) {
    if (o.with_prefix) add("prefix", Request{Strategy::kPrefixReuse, false, 0, t.get(), -1});
    add("full-reuse", Request{Strategy::kFullReuse, false, 0, t.get(), -1});
    for (double r : o.ratios) add("blend", Request{Strategy::kCacheBlend, false, r, t.get(), -1});
    if ((controller && with_inproc) || with_grpc) {
      Request rq{Strategy::kCacheBlend, true, 0, t.get(), -1};
      if (controller && with_inproc) configs.push_back({"controller", rq, false});
      if (grpc_for(t.get()) != nullptr) configs.push_back({"controller", rq, true});
    }
  }
  // Bytes of the fused KV the engine receives per request: the sidecar's
  // default wire dtype, f16 (SidecarOptions::engine_kv_wire_dtype).
  const double fused_wire_bytes = 2.0 * shape.layers * shape.kv_heads * shape.head_dim *
                                  static_cast<double>(context_tokens + query_tokens) * 2;
  out << absl::StrFormat("# matrix: %d configurations x %d prompts x %d repeats\n", configs.size(),
                         prompts.size(), o.repeats);
  // Kernel rates are re-measured between requests (every
  // `calibrate_every` configurations) so that they see the same machine load
  // as the requests; the prediction uses their field-wise median.
  std::vector<CpuCeilings> kernel_samples = {ceilings};
  CpuMeasureOptions recal = cmo;
  recal.file_bytes = 0;
  recal.copy_bytes = std::min<size_t>(recal.copy_bytes, size_t{32} << 20);
  int since_cal = 0;
  // matrix_sample: the fields every matrix sample shares; record: log it
  // (one line, `suffix` appended) and keep it.
  auto matrix_sample = [](const Config& c, size_t pi, int r, double ratio) {
    TtftSample s;
    s.phase = "matrix";
    s.strategy = c.strategy;
    s.tier = c.rq.tier ? c.rq.tier->name : "-";
    s.ratio = ratio;
    s.prompt = static_cast<int>(pi);
    s.rep = r;
    return s;
  };
  auto record = [&](TtftSample s, const std::string& suffix) {
    out << absl::StrFormat("  %-16s %-5s prompt %d rep %d: %8.1f ms%s\n",
                           StrategyLabel(s.strategy, s.ratio), s.tier, s.prompt, s.rep,
                           s.ttft_s * 1e3, suffix);
    out.flush();
    rep.samples.push_back(std::move(s));
  };
  for (int r = 0; r < o.repeats; ++r) {
    for (size_t pi = 0; pi < prompts.size(); ++pi) {
      for (const Config& c : configs) {
        if (o.calibrate_every > 0 && ++since_cal >= o.calibrate_every) {
          since_cal = 0;
          ASSIGN_OR_RETURN(CpuCeilings k, MeasureCpu(recal));
          kernel_samples.push_back(std::move(k));
        }
        if (c.grpc) {
          GrpcTtftPath* path = grpc_for(c.rq.tier);
          const std::string tname = c.rq.tier ? c.rq.tier->name : "";
          std::vector<uint64_t> ids;
          const auto& cat = tname.empty() ? prompts[pi].cat : prompts[pi].cat_by_tier[tname];
          for (const CatalogueChunk& cc : cat) ids.push_back(cc.chunk_id);
          if (tname == "ssd") FadviseTree(path->data_dir() + "/kv");
          const bool auto_ratio = c.strategy == "controller";
          ASSIGN_OR_RETURN(GrpcOutcome g, path->Generate(ids, prompts[pi].query, c.rq.strategy,
                                                         c.rq.ratio, auto_ratio));
          TtftSample s = matrix_sample(c, pi, r, auto_ratio ? g.ratio : c.rq.ratio);
          s.path = "grpc";
          s.context_tokens = g.context_tokens;
          s.recomputed_rows = g.recomputed_tokens;
          s.ttft_s = g.ttft_s;
          s.rpc_engine_ttft_s = g.engine_ttft_s;
          s.rpc_fetch_s = g.fetch_s;
          s.rpc_blend_s = g.blend_s;
          s.rpc_prefill_s = g.query_prefill_s;
          s.wire_bytes =
              c.rq.strategy == Strategy::kFullPrefill ? 0 : static_cast<uint64_t>(fused_wire_bytes);
          record(std::move(s), auto_ratio ? " (grpc) -- sidecar controller: " + g.controller_reason
                                          : std::string(" (grpc)"));
          continue;
        }
        make_cold(c.rq.tier);
        ASSIGN_OR_RETURN(Outcome oc,
                         RunRequest(*blender, controller.get(), *model, prompts[pi], c.rq));
        TtftSample s = matrix_sample(c, pi, r, c.strategy == "controller" ? oc.ratio : c.rq.ratio);
        s.context_tokens = oc.context;
        s.recomputed_rows = oc.recomputed;
        s.kv_bytes = oc.kv_bytes;
        s.ttft_s = oc.ttft_s;
        s.open_s = oc.open_s;
        s.stages = oc.stages;
        record(std::move(s), "");
      }
    }
  }
  const CpuCeilings kernel_median = MedianCeilings(kernel_samples);
  {
    blend::HardwareSpec spec = CpuHardwareSpec(kernel_median, 1.0);
    // Loads: the tier probes (measured once, before the matrix).
    spec.name = "cpu-calibrated";
    spec.ram_tier_bw = cal.ram_tier_bw;
    spec.ssd_tier_bw = cal.ssd_tier_bw;
    spec.remote_tier_bw = cal.remote_tier_bw;
    for (int i = 0; i < 3; ++i) spec.tier_open_s[i] = cal.tier_open_s[i];
    cal = spec;
  }
  rep.cpu = cal;
  const blend::CostModel final_cm(shape, cal);
  out << absl::StrFormat("# kernels, median of %d calibrations during the matrix: %s\n",
                         kernel_samples.size(), DescribeKernelRates(kernel_median));

  // ---- Aggregate ----
  // The Blender's first chunk sits at offset 0 (exact; the prefix of
  // prefix caching).
  blend::RequestShape rs;
  rs.context_tokens = context_tokens;
  rs.query_tokens = query_tokens;
  rs.exact_prefix_tokens = static_cast<int64_t>(prompts[0].chunks[0].size());
  rs.cached_chunks = static_cast<int64_t>(prompts[0].chunks.size());
  auto predict = [&](const blend::CostModel& cm, const std::string& strategy, blend::Tier tier,
                     double ratio) {
    if (strategy == "full-prefill") return cm.PredictFullPrefill(rs);
    if (strategy == "prefix") return cm.PredictPrefix(rs, tier);
    if (strategy == "full-reuse") return cm.PredictBlend(rs, 0, tier);
    return cm.PredictBlend(rs, ratio, tier);
  };
  double full_p50 = 0, full_p50_grpc = 0;
  for (const Config& c : configs) {
    const std::string tier = c.rq.tier ? c.rq.tier->name : "-";
    const std::string path = c.grpc ? "grpc" : "inproc";
    std::vector<const TtftSample*> mine;
    for (const auto& s : rep.samples) {
      if (s.phase == "matrix" && s.strategy == c.strategy && s.tier == tier && s.path == path &&
          (c.strategy != "blend" || s.ratio == c.rq.ratio)) {
        mine.push_back(&s);
      }
    }
    if (mine.empty()) continue;
    std::vector<double> t;
    double bytes = 0, ratio_sum = 0;
    for (const auto* s : mine) {
      t.push_back(s->ttft_s);
      bytes += static_cast<double>(s->kv_bytes);
      ratio_sum += s->ratio;
    }
    TtftRow row;
    row.strategy = c.strategy;
    row.tier = tier;
    row.path = path;
    row.ratio = ratio_sum / static_cast<double>(mine.size());
    row.ttft = Summarize(t);
    row.kv_mb = bytes / static_cast<double>(mine.size()) / 1e6;
    std::sort(mine.begin(), mine.end(),
              [](const TtftSample* a, const TtftSample* b) { return a->ttft_s < b->ttft_s; });
    row.median = *mine[mine.size() / 2];
    row.stages = row.median.stages;
    row.wire_mb = static_cast<double>(row.median.wire_bytes) / 1e6;
    if (!c.grpc) {
      // The in-process rows are what the cost model describes; the gRPC
      // rows' extra is reported as measured transport overhead.
      const blend::Tier bt = c.rq.tier ? c.rq.tier->tier : blend::Tier::kRam;
      row.predicted_raw_s = predict(raw_cm, c.strategy, bt, row.ratio).total_s;
      row.predicted = predict(final_cm, c.strategy, bt, row.ratio);
      row.predicted_cal_s = row.predicted.total_s;
    }
    if (c.strategy == "full-prefill") (c.grpc ? full_p50_grpc : full_p50) = row.ttft.p50;
    const double base = c.grpc ? full_p50_grpc : full_p50;
    row.vs_full = base > 0 ? row.ttft.p50 / base : 0;
    rep.rows.push_back(row);
  }
  // Transport overhead: each gRPC row against its in-process twin.
  for (TtftRow& g : rep.rows) {
    if (g.path != "grpc") continue;
    for (const TtftRow& i : rep.rows) {
      if (i.path == "inproc" && i.strategy == g.strategy && i.tier == g.tier &&
          (g.strategy == "controller" || std::abs(i.ratio - g.ratio) < 1e-9)) {
        g.transport_s = g.ttft.p50 - i.ttft.p50;
      }
    }
  }

  // ---- Quality deltas (optional) ----
  if (o.quality_prompts > 0) {
    blend::QualityBenchOptions qo;
    qo.model_path = o.model_spec;
    qo.max_seq_len = o.max_seq_len > 0 ? o.max_seq_len : 512;
    qo.prompts = o.quality_prompts;
    qo.chunks = o.chunks;
    qo.chunk_tokens_min = qo.chunk_tokens_max = o.chunk_tokens;
    qo.query_tokens = std::min(o.query_tokens, 16);
    qo.ratios = o.ratios;
    std::ostringstream qlog;
    absl::StatusOr<std::vector<blend::StrategyQuality>> q = blend::RunQualityBench(qo, qlog);
    if (!q.ok()) {
      rep.notes.push_back("quality bench failed: " + q.status().ToString());
    } else {
      for (TtftRow& row : rep.rows) {
        for (const auto& sq : *q) {
          const bool match =
              (row.strategy == "full-reuse" && sq.family == "full-reuse") ||
              (row.strategy == "prefix" && sq.family == "prefix-reuse") ||
              (row.strategy == "blend" && sq.family == "gradual" &&
               std::abs(sq.ratio - row.ratio) < 1e-9);
          if (match) {
            row.quality_kl = sq.kl;
            row.quality_top1 = sq.top1;
          }
        }
        if (row.strategy == "full-prefill") row.quality_kl = 0, row.quality_top1 = 1;
      }
    }
  }

  // ---- Load: concurrency levels ----
  struct LoadRow {
    int concurrency = 0;
    int requests = 0;
    double wall_s = 0;
    LatencySummary ttft;
  };
  std::vector<LoadRow> load_rows;
  TierStore* ram = nullptr;
  for (auto& t : tiers) {
    if (t->name == "ram") ram = t.get();
  }
  if (ram != nullptr && o.load_requests > 0) {
    for (int conc : o.concurrency) {
      if (conc <= 0) continue;
      std::atomic<int> next{0};
      std::mutex mu;
      absl::Status first_error;
      std::vector<TtftSample> got;
      const double t0 = Now();
      std::vector<std::thread> threads;
      for (int th = 0; th < conc; ++th) {
        threads.emplace_back([&] {
          for (;;) {
            const int i = next.fetch_add(1);
            if (i >= o.load_requests) return;
            const Prompt& p = prompts[i % prompts.size()];
            absl::StatusOr<Outcome> oc = RunRequest(
                *blender, nullptr, *model, p,
                Request{Strategy::kCacheBlend, false, o.load_ratio, ram, -1});
            std::lock_guard<std::mutex> lock(mu);
            if (!oc.ok()) {
              if (first_error.ok()) first_error = oc.status();
              continue;
            }
            TtftSample s;
            s.phase = "load";
            s.strategy = "blend";
            s.tier = "ram";
            s.ratio = o.load_ratio;
            s.concurrency = conc;
            s.prompt = static_cast<int>(i % prompts.size());
            s.context_tokens = oc->context;
            s.recomputed_rows = oc->recomputed;
            s.kv_bytes = oc->kv_bytes;
            s.ttft_s = oc->ttft_s;
            s.open_s = oc->open_s;
            s.stages = oc->stages;
            got.push_back(std::move(s));
          }
        });
      }
      for (auto& th : threads) th.join();
      RETURN_IF_ERROR(first_error);
      LoadRow lr;
      lr.concurrency = conc;
      lr.requests = static_cast<int>(got.size());
      lr.wall_s = Now() - t0;
      std::vector<double> t;
      for (const auto& s : got) t.push_back(s.ttft_s);
      lr.ttft = Summarize(t);
      out << absl::StrFormat("  load c=%d: %d requests in %.2f s = %.2f req/s, p50 %.0f ms\n",
                             conc, lr.requests, lr.wall_s, lr.requests / lr.wall_s,
                             lr.ttft.p50 * 1e3);
      load_rows.push_back(lr);
      for (auto& s : got) rep.samples.push_back(std::move(s));
    }
  }

  // ---- Speedup vs context length ----
  struct SweepRow {
    int chunks = 0;
    int64_t context = 0;
    double full_s = 0, reuse_s = 0, blend_s = 0;
  };
  std::vector<SweepRow> sweep;
  if (ram != nullptr) {
    for (int n : o.context_sweep) {
      if (n <= 0 || n > static_cast<int>(prompts[0].chunks.size())) continue;
      SweepRow sr;
      sr.chunks = n;
      std::vector<double> f, u, b;
      for (int r = 0; r < o.repeats; ++r) {
        for (const auto& [strategy, rq] :
             std::vector<std::pair<std::string, Request>>{
                 {"full-prefill", {Strategy::kFullPrefill, false, 0, nullptr, n}},
                 {"full-reuse", {Strategy::kFullReuse, false, 0, ram, n}},
                 {"blend", {Strategy::kCacheBlend, false, o.load_ratio, ram, n}}}) {
          ASSIGN_OR_RETURN(Outcome oc, RunRequest(*blender, nullptr, *model, prompts[0], rq));
          sr.context = oc.context;
          (strategy == "full-prefill" ? f : strategy == "full-reuse" ? u : b).push_back(oc.ttft_s);
          TtftSample s;
          s.phase = "sweep";
          s.strategy = strategy;
          s.tier = rq.tier ? "ram" : "-";
          s.ratio = rq.ratio;
          s.context_tokens = oc.context;
          s.recomputed_rows = oc.recomputed;
          s.kv_bytes = oc.kv_bytes;
          s.ttft_s = oc.ttft_s;
          s.open_s = oc.open_s;
          s.stages = oc.stages;
          s.rep = r;
          rep.samples.push_back(std::move(s));
        }
      }
      sr.full_s = Percentile(f, 0.5);
      sr.reuse_s = Percentile(u, 0.5);
      sr.blend_s = Percentile(b, 0.5);
      out << absl::StrFormat("  sweep %d chunks (%d tokens): full %.0f ms, reuse %.0f ms, blend %.0f ms\n",
                             n, sr.context, sr.full_s * 1e3, sr.reuse_s * 1e3, sr.blend_s * 1e3);
      sweep.push_back(sr);
    }
  }

  // ---- Multi-user (Zipf popularity over a shared pool; RAM over SSD) ----
  std::string multi_md;
  if (o.multi_user_requests > 0) {
    std::vector<std::vector<int32_t>> pool(o.pool_chunks);
    std::vector<kvstore::ChunkKey> pool_keys;
    uint64_t chunk_bytes = 0;
    for (auto& c : pool) {
      c.resize(o.chunk_tokens);
      for (auto& t : c) t = tok(rng);
    }
    kvstore::RamTierOptions ro;
    std::vector<blend::StoreChunk> encoded;
    for (const auto& c : pool) {
      ASSIGN_OR_RETURN(blend::ChunkKV kv, blend::PrecomputeChunk(*model, c));
      ASSIGN_OR_RETURN(blend::StoreChunk sc, blend::EncodeForStore(kv));
      chunk_bytes = sc.chunk->TotalBytes();
      pool_keys.push_back(sc.key);
      encoded.push_back(std::move(sc));
    }
    ro.capacity_bytes = std::max<uint64_t>(1, chunk_bytes * o.ram_budget_chunks);
    ro.num_shards = 1;
    ASSIGN_OR_RETURN(std::shared_ptr<kvstore::Tier> ram_tier, kvstore::CreateRamTier(ro));
    kvstore::SsdTierOptions so;
    so.path = work + "/multi-ssd";
    so.sync_writes = false;
    ASSIGN_OR_RETURN(std::shared_ptr<kvstore::Tier> ssd_tier, kvstore::CreateSsdTier(so));
    // Cold start: every chunk on SSD only; the RAM tier warms by promotion.
    ASSIGN_OR_RETURN(auto ssd_only, kvstore::TieredStore::Create({}, {ssd_tier}));
    for (const auto& sc : encoded) RETURN_IF_ERROR(ssd_only->Put(sc.key, sc.chunk));
    RETURN_IF_ERROR(ssd_only->Flush());
    ssd_only.reset();
    encoded.clear();
    ASSIGN_OR_RETURN(std::shared_ptr<kvstore::TieredStore> store,
                     kvstore::TieredStore::Create({}, {ram_tier, ssd_tier}));
    const Zipf zipf(o.pool_chunks, o.zipf_s);
    std::atomic<int> next{0};
    std::mutex mu;
    absl::Status first_error;
    std::vector<double> ttft_first, ttft_second;
    uint64_t ram_hits = 0, ssd_hits = 0;
    const double t0 = Now();
    std::vector<std::thread> threads;
    for (int th = 0; th < std::max(1, o.multi_user_concurrency); ++th) {
      threads.emplace_back([&, th] {
        std::mt19937_64 trng(o.seed * 7919 + th);
        for (;;) {
          const int i = next.fetch_add(1);
          if (i >= o.multi_user_requests) return;
          Prompt p;
          std::vector<int> picked;
          while (static_cast<int>(picked.size()) < std::min(o.chunks, o.pool_chunks)) {
            const int c = zipf(trng);
            if (std::find(picked.begin(), picked.end(), c) == picked.end()) picked.push_back(c);
          }
          for (int c : picked) {
            p.chunks.push_back(pool[c]);
            p.keys.push_back(pool_keys[c]);
          }
          p.query = prompts[i % prompts.size()].query;
          TierStore ts;
          ts.name = "ram+ssd";
          ts.store = store;
          absl::StatusOr<Outcome> oc = RunRequest(
              *blender, nullptr, *model, p,
              Request{Strategy::kCacheBlend, false, o.load_ratio, &ts, -1});
          std::lock_guard<std::mutex> lock(mu);
          if (!oc.ok()) {
            if (first_error.ok()) first_error = oc.status();
            continue;
          }
          for (size_t ti : oc->tier_index) (ti == 0 ? ram_hits : ssd_hits)++;
          (i < o.multi_user_requests / 2 ? ttft_first : ttft_second).push_back(oc->ttft_s);
          TtftSample s;
          s.phase = "multi-user";
          s.strategy = "blend";
          s.tier = "ram+ssd";
          s.ratio = o.load_ratio;
          s.concurrency = o.multi_user_concurrency;
          s.prompt = i;
          s.context_tokens = oc->context;
          s.recomputed_rows = oc->recomputed;
          s.kv_bytes = oc->kv_bytes;
          s.ttft_s = oc->ttft_s;
          s.open_s = oc->open_s;
          s.stages = oc->stages;
          rep.samples.push_back(std::move(s));
        }
      });
    }
    for (auto& th : threads) th.join();
    RETURN_IF_ERROR(first_error);
    const double wall = Now() - t0;
    const uint64_t evictions = store->TierStatsAll()[0].evictions;
    const LatencySummary a = Summarize(ttft_first), b = Summarize(ttft_second);
    multi_md = absl::StrFormat(
        "\n### Multi-user (Zipf s=%.2f over %d chunks, RAM budget %d chunks over SSD, "
        "concurrency %d, blend r=%.2f)\n\n"
        "%d requests in %.2f s = %.2f req/s; chunk reads served from RAM %d, from SSD %d "
        "(RAM hit rate %.0f%%); RAM evictions %d.\n\n"
        "| half | n | p50 ms | p95 ms | p99 ms |\n|---|---:|---:|---:|---:|\n"
        "| first (cold) | %d | %s | %s | %s |\n| second (warm) | %d | %s | %s | %s |\n",
        o.zipf_s, o.pool_chunks, o.ram_budget_chunks, o.multi_user_concurrency, o.load_ratio,
        o.multi_user_requests, wall, o.multi_user_requests / wall, ram_hits, ssd_hits,
        100.0 * ram_hits / std::max<uint64_t>(1, ram_hits + ssd_hits), evictions, a.count,
        Ms(a.p50), Ms(a.p95), Ms(a.p99), b.count, Ms(b.p50), Ms(b.p95), Ms(b.p99));
    out << multi_md;
  }

  // ---- Markdown ----
  std::ostringstream md;
  md << "Workload: " << workload << "; model `" << o.model_spec << "`, KV "
     << kernels::DTypeName(o.kv_dtype) << ", " << o.repeats << " pass(es), path " << o.path
     << " (inproc: Blender over StoreKvSource streams, loading overlapped; grpc: client -> "
        "ragkv engine -> sidecar Blend over loopback gRPC).\n\n";
  md << absl::StrFormat(
      "CPU calibration (same run): sgemm %.1f GFLOP/s (n=%d), memcpy %.2f GB/s, cold file "
      "read %.2f GB/s; kernels of one layer of this model (median of %d calibrations "
      "interleaved with the matrix, each the median of its runs): %s. A full prefill of one "
      "%d-token chunk ran at %.0f%% of the sgemm roofline (reported only). \"pred raw\" is "
      "the pure roofline; \"pred cal\" uses the measured kernel rates and each tier's "
      "probed load bandwidth (docs/planner.md).\n\n",
      ceilings.sgemm_flops / 1e9, ceilings.gemm_n, ceilings.copy_bytes_per_s / 1e9,
      ceilings.file_read_bytes_per_s / 1e9, kernel_samples.size(),
      DescribeKernelRates(kernel_median), best_chunk_tokens, rep.efficiency * 100);
  for (const auto& n : rep.notes) md << "- " << n << "\n";
  if (!rep.notes.empty()) md << "\n";
  const bool quality = o.quality_prompts > 0;
  auto pred = [](double s) { return s > 0 ? Ms(s) : std::string("-"); };
  md << "| strategy | tier | path | r | n | p50 ms | p95 ms | p99 ms | vs full | transport ms "
        "| pred raw ms | pred cal ms | cal/meas | KV MB | load ms | load-wait ms | layer0 ms | "
        "select ms | recompute ms |"
     << (quality ? " KL | top-1 |" : "") << "\n";
  md << "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        "---:|"
     << (quality ? "---:|---:|" : "") << "\n";
  for (const TtftRow& r : rep.rows) {
    const bool g = r.path == "grpc";
    md << absl::StrFormat(
        "| %s | %s | %s | %.2f | %d | %s | %s | %s | %.3f | %s | %s | %s | %s | %.1f | %s | %s | "
        "%s | %s | %s |",
        r.strategy, r.tier, r.path, r.ratio, r.ttft.count, Ms(r.ttft.p50), Ms(r.ttft.p95),
        Ms(r.ttft.p99), r.vs_full, g ? Ms(r.transport_s) : std::string("-"),
        pred(r.predicted_raw_s), pred(r.predicted_cal_s),
        r.predicted_cal_s > 0 && r.ttft.p50 > 0
            ? absl::StrFormat("%.2f", r.predicted_cal_s / r.ttft.p50)
            : std::string("-"),
        g ? r.wire_mb : r.kv_mb, g ? "-" : Ms(r.stages.load_s),
        g ? "-" : Ms(r.stages.load_wait_s), g ? "-" : Ms(r.stages.layer0_s),
        g ? "-" : Ms(r.stages.selection_s), g ? "-" : Ms(r.stages.recompute_s));
    if (quality) {
      md << (r.quality_kl >= 0 ? absl::StrFormat(" %.4f | %.3f |", r.quality_kl, r.quality_top1)
                               : std::string(" - | - |"));
    }
    md << "\n";
  }
  md << "\n(KV MB: bytes read from the tier per request; for gRPC rows, the fused f16 KV "
        "streamed from the sidecar to the engine.)\n";
  // Predicted vs measured, by stage (in-process rows; medians).
  md << "\nPrediction by stage (calibrated model, ms; measured median in parentheses; "
        "\"other\" = measured TTFT minus the measured stages: fused-cache allocation, "
        "embedding, merge, logits):\n\n"
        "| strategy | tier | r | open | alloc | exposed load | layer0 | select | recompute | "
        "logits | total | measured | cal/meas |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const TtftRow& r : rep.rows) {
    if (r.path != "inproc" || r.predicted_cal_s <= 0) continue;
    const blend::RequestPrediction& p = r.predicted;
    const blend::StageTimings& st = r.stages;
    const double other = r.median.ttft_s - r.median.open_s - st.load_wait_s - st.layer0_s -
                         st.selection_s - st.recompute_s;
    md << absl::StrFormat(
        "| %s | %s | %.2f | %s (%s) | %s | %s (%s) | %s (%s) | %s (%s) | %s (%s) | %s | %s (other "
        "%s) | %s | %.2f |\n",
        r.strategy, r.tier, r.ratio, Ms(p.open_s), Ms(r.median.open_s), Ms(p.alloc_s),
        Ms(p.exposed_load_s), Ms(st.load_wait_s),
        Ms(p.layer0_s), Ms(st.layer0_s), Ms(p.selection_s), Ms(st.selection_s),
        Ms(p.recompute_s), Ms(st.recompute_s), Ms(p.logits_s), Ms(p.total_s), Ms(other),
        Ms(r.ttft.p50), r.ttft.p50 > 0 ? p.total_s / r.ttft.p50 : 0.0);
  }
  // The real path, by stage (engine breakdown of the median sample).
  bool any_grpc = false;
  for (const TtftRow& r : rep.rows) any_grpc |= r.path == "grpc";
  if (any_grpc) {
    md << "\ngRPC path by stage (median sample; engine.proto TtftBreakdown, ms): client TTFT = "
          "engine TTFT + the client hop; engine TTFT = fetch (sidecar store reads, or GetChunks "
          "for full prefill) + Blend RPC (sidecar blend + streaming the fused f16 KV + import "
          "into the engine's cache) + the engine's own prefill (the last query token on top "
          "of the fused KV, which holds the sidecar's query rows; every row for full "
          "prefill):\n\n"
          "| strategy | tier | r | client p50 | in-process p50 | transport | engine TTFT | fetch | "
          "blend RPC | engine prefill | wire MB |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for (const TtftRow& r : rep.rows) {
      if (r.path != "grpc") continue;
      const TtftSample& m = r.median;
      md << absl::StrFormat("| %s | %s | %.2f | %s | %s | %s | %s | %s | %s | %s | %.1f |\n",
                            r.strategy, r.tier, r.ratio, Ms(r.ttft.p50), Ms(r.ttft.p50 - r.transport_s),
                            Ms(r.transport_s), Ms(m.rpc_engine_ttft_s), Ms(m.rpc_fetch_s),
                            Ms(m.rpc_blend_s), Ms(m.rpc_prefill_s), r.wire_mb);
    }
  }
  // Targets (issue 8).
  auto find_row = [&](const std::string& strategy, const std::string& tier,
                      double ratio) -> const TtftRow* {
    for (const TtftRow& r : rep.rows) {
      if (r.path == "inproc" && r.strategy == strategy && r.tier == tier &&
          (strategy != "blend" || std::abs(r.ratio - ratio) < 1e-9)) {
        return &r;
      }
    }
    return nullptr;
  };
  md << "\nTargets (vs full prefill, p50):\n\n";
  for (const auto& [strategy, tier, ratio, target] :
       std::vector<std::tuple<std::string, std::string, double, double>>{
           {"blend", "ram", 0.15, 0.33}, {"blend", "ssd", 0.15, 0.40},
           {"full-reuse", "ram", 0, 0.15}, {"full-reuse", "ssd", 0, 0.15}}) {
    const TtftRow* r = find_row(strategy, tier, ratio);
    if (r == nullptr) continue;
    const blend::StageTimings& st = r->stages;
    md << absl::StrFormat(
        "- %s from %s: %.3f x full (target <= %.2f): **%s**%s\n", StrategyLabel(strategy, ratio),
        tier, r->vs_full, target, r->vs_full <= target ? "met" : "missed",
        r->vs_full <= target
            ? ""
            : absl::StrFormat(" -- time went to: load %s ms (compute waited %s), rerotate %s, "
                              "embed %s, layer0 %s, selection %s, recompute %s, merge %s, "
                              "logits %s ms",
                              Ms(st.load_s), Ms(st.load_wait_s), Ms(st.rerotate_s),
                              Ms(st.embed_s), Ms(st.layer0_s), Ms(st.selection_s),
                              Ms(st.recompute_s), Ms(st.merge_s), Ms(st.logits_s)));
  }
  if (!load_rows.empty()) {
    md << absl::StrFormat(
        "\nUnder load (blend r=%.2f from RAM, %d requests per level; the machine has %u "
        "hardware threads, so higher levels queue):\n\n"
        "| concurrency | requests | req/s | p50 ms | p95 ms | p99 ms |\n"
        "|---:|---:|---:|---:|---:|---:|\n",
        o.load_ratio, o.load_requests, std::thread::hardware_concurrency());
    for (const auto& l : load_rows) {
      md << absl::StrFormat("| %d | %d | %.2f | %s | %s | %s |\n", l.concurrency, l.requests,
                            l.requests / l.wall_s, Ms(l.ttft.p50), Ms(l.ttft.p95),
                            Ms(l.ttft.p99));
    }
  }
  if (!sweep.empty()) {
    md << absl::StrFormat(
        "\nSpeedup vs context length (prompt 0's first n chunks, RAM tier):\n\n"
        "| chunks | context tokens | full ms | full-reuse ms | blend r=%.2f ms | reuse speedup | "
        "blend speedup |\n|---:|---:|---:|---:|---:|---:|---:|\n",
        o.load_ratio);
    for (const auto& s : sweep) {
      md << absl::StrFormat("| %d | %d | %s | %s | %s | %.2f | %.2f |\n", s.chunks, s.context,
                            Ms(s.full_s), Ms(s.reuse_s), Ms(s.blend_s), s.full_s / s.reuse_s,
                            s.full_s / s.blend_s);
    }
  }
  md << multi_md;
  rep.markdown = md.str();
  out << "\n" << rep.markdown;

  // ---- Files ----
  if (!o.out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.out_dir, ec);
    const std::string d = o.out_dir;
    {
      std::ofstream f(d + "/samples.csv");
      f << "phase,strategy,tier,path,ratio,concurrency,prompt,rep,context_tokens,"
           "recomputed_rows,kv_bytes,ttft_ms,open_ms,load_ms,load_wait_ms,rerotate_ms,embed_ms,"
           "layer0_ms,selection_ms,recompute_ms,merge_ms,logits_ms,rpc_engine_ttft_ms,"
           "rpc_fetch_ms,rpc_blend_ms,rpc_prefill_ms,wire_bytes\n";
      for (const auto& s : rep.samples) {
        const auto& t = s.stages;
        f << absl::StrFormat("%s,%s,%s,%s,%.4f,%d,%d,%d,%d,%d,%d,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,"
                             "%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%d\n",
                             s.phase, s.strategy, s.tier, s.path, s.ratio, s.concurrency,
                             s.prompt, s.rep, s.context_tokens, s.recomputed_rows, s.kv_bytes,
                             s.ttft_s * 1e3, s.open_s * 1e3, t.load_s * 1e3, t.load_wait_s * 1e3,
                             t.rerotate_s * 1e3, t.embed_s * 1e3, t.layer0_s * 1e3,
                             t.selection_s * 1e3, t.recompute_s * 1e3, t.merge_s * 1e3,
                             t.logits_s * 1e3, s.rpc_engine_ttft_s * 1e3, s.rpc_fetch_s * 1e3,
                             s.rpc_blend_s * 1e3, s.rpc_prefill_s * 1e3, s.wire_bytes);
      }
      if (!f) return absl::InternalError("cannot write " + d + "/samples.csv");
      rep.files.push_back(d + "/samples.csv");
    }
    {
      std::ofstream f(d + "/samples.json");
      f << "{\"model\":\"" << o.model_spec << "\",\"efficiency\":" << rep.efficiency
        << ",\"sgemm_flops\":" << ceilings.sgemm_flops
        << ",\"memcpy_bytes_per_s\":" << ceilings.copy_bytes_per_s << ",\"rows\":[";
      for (size_t i = 0; i < rep.rows.size(); ++i) {
        const auto& r = rep.rows[i];
        f << (i ? "," : "")
          << absl::StrFormat("{\"strategy\":\"%s\",\"tier\":\"%s\",\"path\":\"%s\","
                             "\"ratio\":%.4f,\"n\":%d,"
                             "\"p50_ms\":%.3f,\"p95_ms\":%.3f,\"p99_ms\":%.3f,\"vs_full\":%.4f,"
                             "\"transport_ms\":%.3f,\"wire_mb\":%.3f,"
                             "\"pred_raw_ms\":%.3f,\"pred_cal_ms\":%.3f,\"kv_mb\":%.3f,"
                             "\"pred_stages_ms\":{\"alloc\":%.3f,\"exposed_load\":%.3f,"
                             "\"load\":%.3f,\"layer0\":%.3f,\"selection\":%.3f,"
                             "\"recompute\":%.3f,\"logits\":%.3f}}",
                             r.strategy, r.tier, r.path, r.ratio, r.ttft.count, r.ttft.p50 * 1e3,
                             r.ttft.p95 * 1e3, r.ttft.p99 * 1e3, r.vs_full, r.transport_s * 1e3,
                             r.wire_mb, r.predicted_raw_s * 1e3, r.predicted_cal_s * 1e3, r.kv_mb,
                             r.predicted.alloc_s * 1e3, r.predicted.exposed_load_s * 1e3,
                             r.predicted.load_s * 1e3, r.predicted.layer0_s * 1e3,
                             r.predicted.selection_s * 1e3, r.predicted.recompute_s * 1e3,
                             r.predicted.logits_s * 1e3);
      }
      f << "],\"samples\":[";
      for (size_t i = 0; i < rep.samples.size(); ++i) {
        const auto& s = rep.samples[i];
        f << (i ? "," : "")
          << absl::StrFormat("{\"phase\":\"%s\",\"strategy\":\"%s\",\"tier\":\"%s\","
                             "\"path\":\"%s\",\"ratio\":%.4f,\"concurrency\":%d,\"prompt\":%d,\"rep\":%d,"
                             "\"context_tokens\":%d,\"recomputed_rows\":%d,\"kv_bytes\":%d,"
                             "\"ttft_ms\":%.3f,\"load_ms\":%.3f,\"recompute_ms\":%.3f}",
                             s.phase, s.strategy, s.tier, s.path, s.ratio, s.concurrency,
                             s.prompt, s.rep, s.context_tokens, s.recomputed_rows, s.kv_bytes,
                             s.ttft_s * 1e3, s.stages.load_s * 1e3, s.stages.recompute_s * 1e3);
      }
      f << "]}\n";
      if (!f) return absl::InternalError("cannot write " + d + "/samples.json");
      rep.files.push_back(d + "/samples.json");
    }
    {
      std::ofstream f(d + "/summary.md");
      f << rep.markdown;
      rep.files.push_back(d + "/summary.md");
    }
    if (o.plots) {
      if (std::system("gnuplot --version >/dev/null 2>&1") != 0) {
        rep.notes.push_back("plots skipped: gnuplot not on PATH");
        out << "# plots skipped: gnuplot not on PATH\n";
      } else {
        const std::string term = Terminal();
        // 1. TTFT vs recompute ratio per tier (full reuse at r = 0).
        {
          std::ofstream f(d + "/ttft_vs_ratio.dat");
          std::string plot;
          int idx = 0;
          for (auto& t : tiers) {
            f << "# tier " << t->name << "\n";
            for (const TtftRow& r : rep.rows) {
              if (r.path == "inproc" && r.tier == t->name &&
                  (r.strategy == "full-reuse" || r.strategy == "blend")) {
                f << absl::StrFormat("%.3f %.3f\n", r.ratio * 100, r.ttft.p50 * 1e3);
              }
            }
            f << "\n\n";
            absl::StrAppend(&plot, idx ? ", " : "", "'", d, "/ttft_vs_ratio.dat' index ", idx,
                            " with linespoints lw 2 title '", t->name, "'");
            ++idx;
          }
          if (full_p50_grpc > 0) {
            for (auto& t : tiers) {
              f << "# grpc path, sidecar with tier " << t->name << "\n";
              int n = 0;
              for (const TtftRow& r : rep.rows) {
                if (r.path == "grpc" && r.tier == t->name &&
                    (r.strategy == "full-reuse" || r.strategy == "blend")) {
                  f << absl::StrFormat("%.3f %.3f\n", r.ratio * 100, r.ttft.p50 * 1e3);
                  ++n;
                }
              }
              f << "\n\n";
              if (n == 0) {
                ++idx;
                continue;
              }
              absl::StrAppend(&plot, idx ? ", " : "", "'", d, "/ttft_vs_ratio.dat' index ", idx,
                              " with linespoints lw 2 dt 3 title '", t->name,
                              " via gRPC (engine)'");
              ++idx;
            }
            absl::StrAppend(&plot, ", ", full_p50_grpc * 1e3,
                            " with lines dt 3 lw 2 title 'full prefill via gRPC'");
          }
          f.close();  // flushed before gnuplot reads it
          const double full = full_p50 * 1e3;
          absl::StrAppend(&plot, idx ? ", " : "", full, " with lines dt 2 lw 2 title 'full prefill'");
          RETURN_IF_ERROR(RunGnuplot(
              d, "ttft_vs_ratio",
              absl::StrCat("set terminal ", term, " size 900,560\nset output '", d,
                           "/ttft_vs_ratio.png'\nset title 'TTFT vs recompute ratio per KV tier'\n"
                           "set xlabel 'recompute ratio r (%)'\nset ylabel 'TTFT p50 (ms)'\n"
                           "set yrange [0:*]\nset key top left\nset grid\nplot ",
                           plot, "\n")));
          rep.files.push_back(d + "/ttft_vs_ratio.png");
        }
        // 2. Speedup vs context length.
        if (!sweep.empty()) {
          std::ofstream f(d + "/speedup_vs_context.dat");
          for (const auto& s : sweep) {
            f << absl::StrFormat("%d %.4f %.4f\n", s.context, s.full_s / s.reuse_s,
                                 s.full_s / s.blend_s);
          }
          f.close();
          RETURN_IF_ERROR(RunGnuplot(
              d, "speedup_vs_context",
              absl::StrCat("set terminal ", term, " size 900,560\nset output '", d,
                           "/speedup_vs_context.png'\nset title 'TTFT speedup over full prefill "
                           "vs context length (RAM tier)'\nset xlabel 'context tokens'\n"
                           "set ylabel 'speedup (x)'\nset yrange [0:*]\nset key top left\n"
                           "set grid\nplot '", d, "/speedup_vs_context.dat' using 1:2 with "
                           "linespoints lw 2 title 'full reuse', '' using 1:3 with linespoints "
                           "lw 2 title 'CacheBlend r=",
                           absl::StrFormat("%.2f", o.load_ratio), "'\n")));
          rep.files.push_back(d + "/speedup_vs_context.png");
        }
        // 3. TTFT CDF under load.
        if (!load_rows.empty()) {
          std::ofstream f(d + "/ttft_cdf_load.dat");
          std::string plot;
          int idx = 0;
          for (const auto& l : load_rows) {
            std::vector<double> t;
            for (const auto& s : rep.samples) {
              if (s.phase == "load" && s.concurrency == l.concurrency) t.push_back(s.ttft_s);
            }
            std::sort(t.begin(), t.end());
            f << "# concurrency " << l.concurrency << "\n";
            for (size_t i = 0; i < t.size(); ++i) {
              f << absl::StrFormat("%.3f %.4f\n", t[i] * 1e3,
                                   static_cast<double>(i + 1) / static_cast<double>(t.size()));
            }
            f << "\n\n";
            absl::StrAppend(&plot, idx ? ", " : "", "'", d, "/ttft_cdf_load.dat' index ", idx,
                            " with steps lw 2 title 'concurrency ", l.concurrency, "'");
            ++idx;
          }
          f.close();
          RETURN_IF_ERROR(RunGnuplot(
              d, "ttft_cdf_load",
              absl::StrCat("set terminal ", term, " size 900,560\nset output '", d,
                           "/ttft_cdf_load.png'\nset title 'TTFT CDF under load (CacheBlend r=",
                           absl::StrFormat("%.2f", o.load_ratio),
                           ", RAM tier)'\nset xlabel 'TTFT (ms)'\nset ylabel 'fraction of "
                           "requests'\nset yrange [0:1]\nset key bottom right\nset grid\nplot ",
                           plot, "\n")));
          rep.files.push_back(d + "/ttft_cdf_load.png");
        }
      }
    }
    for (const auto& f : rep.files) out << "# wrote " << f << "\n";
  }
  return rep;
}

}  // namespace ragkv::services
