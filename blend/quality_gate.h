// quality_gate.h: the per-model quality gate (docs/quality_gate.md).
//
// `ragkv calibrate` runs canary prompts through full prefill and through
// CacheBlend at every candidate ratio and selector, and keeps, per model
// fingerprint, the cheapest setting that meets the targets (mean KL of the
// query positions' next-token distributions vs full prefill <= max_kl, top-1
// agreement >= min_top1) -- or, when none does, blending off. The sidecar
// reads the record at start and serves by it (DecideGate).
//
// The record is a small JSON file, `<data-dir>/calibration/<fingerprint>.json`
// (format "ragkv-calibration", version 1, with an FNV-1a 64 checksum of its
// body), written atomically (temp file, fsync, rename).
//
// Thread safety: functions are reentrant; a GateDecision is immutable.
#ifndef RAGKV_BLEND_QUALITY_GATE_H_
#define RAGKV_BLEND_QUALITY_GATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "blend/blender.h"

namespace ragkv::blend {

// CanaryPrompt: a prompt of the calibration set: a cached prefix (may be
// empty), chunks precomputed alone, a query whose next-token distributions
// are compared.
struct CanaryPrompt {
  std::vector<int32_t> prefix;
  std::vector<std::vector<int32_t>> chunks;
  std::vector<int32_t> query;
};

struct GateTargets {
  double max_kl = 0.005;   // mean KL(full || blend) at the query positions (nats)
  double min_top1 = 0.97;  // argmax agreement with full prefill
};

struct GateCandidate {
  Selector selector = Selector::kLookaheadDeviation;
  double ratio = 0;
  double kl = 0, top1 = 0;
  bool meets = false;
};

struct GateRecord {
  int version = 1;
  std::string fingerprint;  // hex, the model's
  GateTargets targets;
  int prompts = 0;
  std::vector<GateCandidate> candidates;  // in the order tried (cheapest first)
  bool blending = false;                  // false: serve full prefill
  Selector selector = Selector::kLookaheadDeviation;
  double ratio = 0;
};

struct CalibrateOptions {
  GateTargets targets;
  std::vector<double> ratios = {0.05, 0.10, 0.15, 0.20, 0.30, 0.50};
  std::vector<Selector> selectors = {Selector::kLookaheadDeviation, Selector::kAttendedDeviation,
                                     Selector::kDeviationAttention, Selector::kDeviation};
};

// QueryAgreement: mean KL(ref || x) and top-1 agreement over `rows` rows of
// [rows, vocab] logits.
struct Agreement {
  double kl = 0, top1 = 0;
};
Agreement QueryAgreement(const float* ref, const float* x, int64_t rows, int vocab);

// Calibrate: every candidate (ratios ascending, then selectors in order) on
// every prompt; the first that meets the targets is chosen. FailedPrecondition
// without prompts; errors of precompute / blending pass through.
absl::StatusOr<GateRecord> Calibrate(const Blender& blender,
                                     const std::vector<CanaryPrompt>& prompts,
                                     const CalibrateOptions& options);

// Encode / Decode: the JSON text. Decode: DataLoss for a damaged record (bad
// JSON, checksum, missing field), FailedPrecondition for another format,
// version or fingerprint than `fingerprint`.
std::string EncodeGateRecord(const GateRecord& record);
absl::StatusOr<GateRecord> DecodeGateRecord(const std::string& text,
                                            const std::string& fingerprint);

// GateRecordPath: `<data_dir>/calibration/<fingerprint>.json`.
std::string GateRecordPath(const std::string& data_dir, const std::string& fingerprint);
absl::Status WriteGateRecord(const std::string& data_dir, const GateRecord& record);
// ReadGateRecord: NotFound when the model was never calibrated.
absl::StatusOr<GateRecord> ReadGateRecord(const std::string& data_dir,
                                          const std::string& fingerprint);

// GateDecision: how the sidecar serves a model.
struct GateDecision {
  enum class Source { kCalibrated, kUncalibrated, kUnreadable };
  Source source = Source::kUncalibrated;
  bool blending = true;
  Selector selector = Selector::kLookaheadDeviation;
  double ratio = 0.15;  // the documented default when uncalibrated
  std::string reason;   // one line, for the Blend response, `ragkv query` and logs
};

// kUncalibratedRatio: the default of a model without a record (measured to
// meet the default targets on stories260K and on the instrument).
inline constexpr double kUncalibratedRatio = 0.15;

// DecideGate: from ReadGateRecord's result: a record -> its setting; NotFound
// -> the uncalibrated default; any other error (damaged, another version) ->
// blending off, the error in the reason.
GateDecision DecideGate(const absl::StatusOr<GateRecord>& record);

}  // namespace ragkv::blend

#endif  // RAGKV_BLEND_QUALITY_GATE_H_
