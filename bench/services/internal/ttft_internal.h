// internal/ttft_internal.h: the stages of `ragkv bench ttft` (RunTtftBench in
// bench_ttft.cc runs them in this order), private to bench/services:
//   workload (ttft_workload.cc): the prompts, synthetic or from a corpus;
//   tiers    (ttft_tiers.cc): the scratch directory, the RAM / SSD / Redis
//            stores (and the private redis-server), the gRPC sidecars,
//            precompute + store, the cold page cache;
//   predict  (ttft_predict.cc): CPU calibration, tier probes, the raw and
//            calibrated cost models, the rows (aggregation + predictions),
//            the quality deltas;
//   runner   (ttft_runner.cc): one request, the matrix of strategies x
//            tiers; (ttft_phases.cc): the load levels, the context sweep,
//            multi-user;
//   report   (ttft_report.cc): the Markdown tables and the output files.
// State passes between the stages in the structs below.
//
// Thread safety: as RunTtftBench (bench_ttft.h): all state belongs to one
// run; the load and multi-user client threads share only what their
// phase's mutex guards.
#ifndef RAGKV_BENCH_SERVICES_INTERNAL_TTFT_INTERNAL_H_
#define RAGKV_BENCH_SERVICES_INTERNAL_TTFT_INTERNAL_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/services/bench_ttft.h"
#include "bench/services/bench_ttft_grpc.h"
#include "blend/blender.h"
#include "blend/calibration.h"
#include "blend/cost_model.h"
#include "blend/loading_controller.h"
#include "kvstore/chunk_key.h"
#include "kvstore/tiered_store.h"
#include "model/model.h"
#include "tests/support/redis_server_process.h"

namespace ragkv::services::ttft_internal {

// Now: steady-clock seconds (only differences are meaningful).
inline double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// ---- Workload (ttft_workload.cc) -------------------------------------------

struct Prompt {
  std::vector<std::vector<int32_t>> chunks;
  std::vector<int32_t> query;
  std::vector<kvstore::ChunkKey> keys;
  std::vector<std::string> texts;     // gRPC path: one document per chunk
  std::vector<CatalogueChunk> cat;    // gRPC path: the first sidecar's chunks
  std::map<std::string, std::vector<CatalogueChunk>> cat_by_tier;  // each sidecar's
};

// TokenRng: the run's one stream of random token ids in [3, vocab): the
// synthetic prompts draw from it first, the multi-user pool after them.
struct TokenRng {
  TokenRng(uint64_t seed, int vocab) : rng(static_cast<uint32_t>(seed)), tok(3, vocab - 1) {}
  int Next() { return tok(rng); }

  std::mt19937 rng;
  std::uniform_int_distribution<int> tok;
};

struct Workload {
  std::vector<Prompt> prompts;
  std::string description;  // the "# bench ttft:" / "Workload:" text
  // Corpus mode: the question split used (empty for synthetic shapes), how
  // many questions of the file are in it, and how many the file has.
  std::string split;
  int split_questions = 0, file_questions = 0;
};

// BuildWorkload: the prompts (corpus questions or synthetic shapes; with the
// gRPC path on, synthetic chunks are texts whose tokens come later from the
// sidecar's catalogue). Errors: tokenizer / corpus load, no usable question.
absl::StatusOr<Workload> BuildWorkload(const TtftBenchOptions& o, int vocab, bool with_grpc,
                                       TokenRng& rng);

// ---- Tiers (ttft_tiers.cc) -------------------------------------------------

// ScratchDir: the run's scratch directory; removed on destruction when the
// bench created it.
class ScratchDir {
 public:
  ScratchDir() = default;
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir();

  // Make: `requested`, or a fresh /tmp/ragkv-ttft-XXXXXX (owned) when empty;
  // created if missing. Errors: mkdtemp failure (InternalError).
  absl::Status Make(const std::string& requested);
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  bool own_ = false;
};

// FadviseTree: POSIX_FADV_DONTNEED on every regular file under `dir`.
int FadviseTree(const std::string& dir);
// DropCachesGlobally: sync + echo 1 > /proc/sys/vm/drop_caches; false when
// not permitted.
bool DropCachesGlobally();

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

// TierSetup: the matrix's KV tiers, the private redis-server, the resolved
// SSD cold-read method and the gRPC sidecars (one per tier). Members are
// destroyed in reverse order: sidecars, redis-server, stores.
struct TierSetup {
  std::vector<std::unique_ptr<TierStore>> stores;
  std::unique_ptr<testing::RedisServerProcess> redis;  // private redis-server
  std::string cold;  // o.ssd_cold as SetupTiers resolved it (auto: fadvise)
  std::map<std::string, std::unique_ptr<GrpcTtftPath>> grpc;

  // GrpcFor: the sidecar that serves a gRPC row of `t` (null: none), and
  // the one full prefill goes through (t null: RAM's, else the first).
  GrpcTtftPath* GrpcFor(const TierStore* t);
  // MakeCold: drops `t`'s files from the page cache (SSD only; by `cold`).
  void MakeCold(TierStore* t) const;
  // Ram: the "ram" store (null: none).
  TierStore* Ram() const;
};

// SetupTiers: one single-tier TieredStore per name of o.tiers (SSD under
// `work`; Redis at o.redis or a private redis-server, skipped with a note
// when neither); notes the SSD cold-read method. Errors: unknown tier,
// store creation.
absl::Status SetupTiers(const TtftBenchOptions& o, const std::string& work, TierSetup& tiers,
                        std::vector<std::string>& notes);

// StartGrpcPaths: one sidecar per tier (one RAM sidecar when there is no
// tier), every prompt's chunks ingested into each; the prompts then use the
// catalogue's tokens. Errors: sidecar start, ingest, sidecars disagreeing.
absl::Status StartGrpcPaths(const TtftBenchOptions& o, const std::string& work,
                            TierSetup& tiers, std::vector<Prompt>& prompts,
                            std::vector<std::string>& notes);

// PrefillBest: the fastest precompute of the longest chunk.
struct PrefillBest {
  double seconds = 1e30;
  int64_t tokens = 0;
};

// PrecomputeAndStore: every chunk precomputed, stored in every tier
// (encoded with `codec`) and sidecar (raw; keys appended to each prompt),
// the tiers flushed; *bytes_per_token: the tiers' record bytes per token.
// Errors: those of the precompute and the stores.
absl::StatusOr<PrefillBest> PrecomputeAndStore(const model::Model& model, TierSetup& tiers,
                                               std::vector<Prompt>& prompts,
                                               kvstore::Codec codec, double* bytes_per_token);

// ---- Predictions (ttft_predict.cc) -----------------------------------------

// Calibration: what the measurements before (and during) the matrix give
// the predictions.
struct Calibration {
  blend::ModelShape shape;
  int64_t context_tokens = 0;  // prompt 0's chunk tokens
  int64_t query_tokens = 0;    // prompt 0's query
  blend::CpuMeasureOptions cmo;     // the calibration's MeasureCpu options
  blend::CpuCeilings ceilings;      // measured before the matrix
  blend::HardwareSpec raw_hw;       // pure roofline (raw predictions)
  blend::HardwareSpec cal;          // calibrated (kernel rates: FinishCalibration's median)
  PrefillBest prefill;
  std::vector<blend::CpuCeilings> kernel_samples;  // ceilings + the matrix's re-measures
  blend::CpuCeilings kernel_median;                // FinishCalibration
};

// Calibrate: CPU ceilings and the kernel rates of one layer at this
// workload's sizes, the tier probes (TierStore::probe_*), the raw and
// calibrated specs, rep.efficiency. Errors: MeasureCpu, probe reads.
absl::Status Calibrate(const TtftBenchOptions& o, const model::Model& model,
                       const std::string& work, const std::vector<Prompt>& prompts,
                       TierSetup& tiers, const PrefillBest& prefill, Calibration& cal,
                       TtftReport& rep);

// PrintCalibration: the "# bench ttft", "# cpu", "# kernels", "# tier" and
// note lines.
void PrintCalibration(const TtftBenchOptions& o, const Workload& workload,
                      const Calibration& cal, const TierSetup& tiers, const TtftReport& rep,
                      std::ostream& out);

// FinishCalibration: the calibrated spec with the median of
// cal.kernel_samples (tier probes kept); sets rep.cpu, prints the median.
void FinishCalibration(Calibration& cal, TtftReport& rep, std::ostream& out);

// ---- Runner (ttft_runner.cc, ttft_phases.cc) -------------------------------

// BenchContext: what every measurement phase reads, and the report it
// appends samples (and notes) to.
struct BenchContext {
  const TtftBenchOptions& o;
  const model::Model& model;
  const blend::Blender& blender;
  std::vector<Prompt>& prompts;
  TierSetup& tiers;
  const std::string& work;  // scratch directory
  TokenRng& rng;
  TtftReport& rep;
  std::ostream& out;
};

// ---- One request -----------------------------------------------------------

struct Request {
  blend::Strategy strategy = blend::Strategy::kCacheBlend;
  bool controller = false;
  double ratio = 0;
  TierStore* tier = nullptr;  // null: full prefill (no KV)
  int chunks = -1;            // use the first n chunks (-1: all)
  // gate: the row the sidecar's quality gate would choose (strategy and
  // ratio left to the server); every other row pins its strategy and ratio.
  bool gate = false;
};

struct Outcome {
  double ttft_s = 0, open_s = 0, ratio = 0;
  uint64_t kv_bytes = 0;
  int64_t recomputed = 0, context = 0;
  int64_t prefix_tokens = 0;  // prefix rows: tokens served from stored blocks
  blend::StageTimings stages;
  std::vector<size_t> tier_index;  // per opened source: the tier that served it

  // FillSample: copies the measured figures into a sample.
  void FillSample(TtftSample* s) const {
    s->context_tokens = context;
    s->recomputed_rows = recomputed;
    s->kv_bytes = kv_bytes;
    s->ttft_s = ttft_s;
    s->open_s = open_s;
    s->stages = stages;
  }
};

// ---- Prefix rows (ttft_prefix.cc) ------------------------------------------

// kPrefixBlockTokens: the prefix cache's block (the sidecar's default
// --prefix-block-tokens, vLLM's block size).
inline constexpr int kPrefixBlockTokens = 16;
// ContextTokens: the prompt's chunks in order (what a prefix cache covers).
std::vector<int32_t> ContextTokens(const Prompt& p);
// SharedPrefixTokens: the leading tokens a and b share, in whole blocks.
int64_t SharedPrefixTokens(const std::vector<int32_t>& a, const std::vector<int32_t>& b);
// SharedWithPrevious: SharedPrefixTokens of prompt i and the one before it
// (cyclically: prompt 0's previous is the last); Previous: that prompt.
const Prompt& Previous(const std::vector<Prompt>& prompts, size_t i);
int64_t SharedWithPrevious(const std::vector<Prompt>& prompts, size_t i);
// ForgetUnsharedPrefix: deletes from `store` the blocks of `tokens`' chain
// that `prev` (the previous prompt's context) does not share.
absl::Status ForgetUnsharedPrefix(kvstore::TieredStore* store, const kvstore::Fingerprint& fp,
                                  const std::vector<int32_t>& tokens,
                                  const std::vector<int32_t>& prev);
// RunRequest: one in-process request through the served request pipeline
// (pipeline/pipeline.h: resolution, the exact-prefix cache, gate, blend,
// store-back) over rq.tier's store, timed from the prompt to the last
// layer; the store-back it schedules runs after the clock stops. Errors: a
// chunk missing from the tier, the pipeline's.
absl::StatusOr<Outcome> RunRequest(const blend::Blender& blender,
                                   blend::LoadingController* controller,
                                   const model::Model& model, const Prompt& p, const Request& rq);

// Config: one configuration of the matrix.
struct Config {
  std::string strategy;
  Request rq;
  bool grpc = false;  // the real path, through the sidecar of rq.tier
};

// MakeController: the loading controller over the probed tiers (null when
// off, without tiers, or when it fails: a note and a line then).
std::unique_ptr<blend::LoadingController> MakeController(BenchContext& b);

// BuildConfigs: every strategy x tier, each gRPC row right after its
// in-process twin.
std::vector<Config> BuildConfigs(BenchContext& b, const blend::LoadingController* controller);

// RunMatrix: every configuration on every prompt, o.repeats passes, with
// the kernel rates re-measured every o.calibrate_every requests (appended
// to cal.kernel_samples). Errors: requests, MeasureCpu.
absl::Status RunMatrix(BenchContext& b, const std::vector<Config>& configs,
                       blend::LoadingController* controller, Calibration& cal);

// FullPrefillP50: the full-prefill rows' p50 per path (0: no such row).
struct FullPrefillP50 {
  double inproc = 0;
  double grpc = 0;
};

// AggregateRows: one row per configuration with samples (with the raw and
// calibrated predictions for the in-process rows), then each gRPC row's
// transport overhead; appended to rep.rows.
FullPrefillP50 AggregateRows(const std::vector<Config>& configs, const Calibration& cal,
                             const std::vector<Prompt>& prompts, TtftReport& rep);

// AddQualityDeltas: o.quality_prompts > 0: blend::RunQualityBench's KL and
// top-1 on the matching rows (a failure is a note).
void AddQualityDeltas(const TtftBenchOptions& o, TtftReport& rep);

struct LoadRow {
  int concurrency = 0;
  int requests = 0;
  double wall_s = 0;
  LatencySummary ttft;
};

struct SweepRow {
  int chunks = 0;
  int64_t context = 0;
  double full_s = 0, reuse_s = 0, blend_s = 0;
};

// Phases: the results of the phases after the matrix.
struct Phases {
  std::vector<LoadRow> load_rows;
  std::vector<SweepRow> sweep;
  std::string multi_md;  // the multi-user section ("" when off)
};

// RunLoad: each concurrency level of o.concurrency (RAM tier, blend at
// o.load_ratio); empty without a RAM tier or load requests.
absl::StatusOr<std::vector<LoadRow>> RunLoad(BenchContext& b);
// RunSweep: full prefill, full reuse and blend over prompt 0's first n
// chunks for each n of o.context_sweep (RAM tier); empty without RAM.
absl::StatusOr<std::vector<SweepRow>> RunSweep(BenchContext& b);
// RunMultiUser: o.multi_user_requests > 0: the Zipf multi-user run over a
// shared pool (RAM over SSD); returns (and prints) its Markdown section.
absl::StatusOr<std::string> RunMultiUser(BenchContext& b);

// ---- Report (ttft_report.cc) -----------------------------------------------

// Ms: seconds as whole milliseconds ("%.0f").
std::string Ms(double s);
// RunGnuplot: writes `script` to dir/name.gp and runs gnuplot on it
// (stderr to dir/name.log). GnuplotTerminal: pngcairo, else png.
absl::Status RunGnuplot(const std::string& dir, const std::string& name, const std::string& script);
std::string GnuplotTerminal();
// StrategyLabel: "blend r=0.15" for blend, else the strategy's name.
std::string StrategyLabel(const std::string& strategy, double ratio);

// BuildMarkdown: the summary (workload, calibration, notes, the tables).
std::string BuildMarkdown(const TtftBenchOptions& o, const std::string& workload,
                          const Calibration& cal, const Phases& phases, const TtftReport& rep);

// WriteFiles: samples.csv, samples.json, summary.md and the plots under
// o.out_dir (appended to rep.files; "# wrote" lines). Errors: unwritable
// files, gnuplot failures.
absl::Status WriteFiles(const TtftBenchOptions& o, const Calibration& cal,
                        const TierSetup& tiers, const FullPrefillP50& full,
                        const Phases& phases, TtftReport& rep, std::ostream& out);

}  // namespace ragkv::services::ttft_internal

#endif  // RAGKV_BENCH_SERVICES_INTERNAL_TTFT_INTERNAL_H_
