#include "blend/quality_gate.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "blend/kv_source.h"
#include "model/sampler.h"
#include "nlohmann/json.hpp"

namespace ragkv::blend {
namespace {

constexpr char kFormat[] = "ragkv-calibration";

uint64_t Fnv1a64(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Prepared: one canary prompt's cached KV and full prefill's query logits.
struct Prepared {
  std::vector<std::unique_ptr<ChunkKV>> kv;
  std::vector<float> ref;
};

absl::StatusOr<Prepared> Prepare(const Blender& blender, const CanaryPrompt& p) {
  Prepared out;
  if (!p.prefix.empty()) {
    ASSIGN_OR_RETURN(ChunkKV k, PrecomputeChunk(blender.model(), p.prefix));
    out.kv.push_back(std::make_unique<ChunkKV>(std::move(k)));
  }
  for (const auto& c : p.chunks) {
    ASSIGN_OR_RETURN(ChunkKV k, PrecomputeChunk(blender.model(), c));
    out.kv.push_back(std::make_unique<ChunkKV>(std::move(k)));
  }
  return out;
}

absl::StatusOr<std::vector<float>> QueryLogitsOf(const Blender& blender, const CanaryPrompt& p,
                                                 const Prepared& prep, BlendOptions o) {
  std::vector<std::unique_ptr<InMemoryKvSource>> src;
  for (const auto& k : prep.kv) src.push_back(std::make_unique<InMemoryKvSource>(k.get()));
  std::vector<BlendSegment> segs;
  size_t i = 0;
  if (!p.prefix.empty()) segs.push_back({SegmentKind::kPrefix, p.prefix, src[i++].get()});
  for (const auto& c : p.chunks) segs.push_back({SegmentKind::kChunk, c, src[i++].get()});
  segs.push_back({SegmentKind::kQuery, p.query, nullptr});
  o.logits = QueryLogits::kAll;
  ASSIGN_OR_RETURN(BlendResult r, blender.Blend(segs, o));
  return std::move(r.logits);
}

nlohmann::json Body(const GateRecord& r) {
  nlohmann::json c = nlohmann::json::array();
  for (const GateCandidate& g : r.candidates) {
    c.push_back({{"selector", SelectorName(g.selector)}, {"ratio", g.ratio}, {"kl", g.kl},
                 {"top1", g.top1}, {"meets", g.meets}});
  }
  return {{"format", kFormat},
          {"version", r.version},
          {"fingerprint", r.fingerprint},
          {"targets", {{"max_kl", r.targets.max_kl}, {"min_top1", r.targets.min_top1}}},
          {"prompts", r.prompts},
          {"candidates", c},
          {"blending", r.blending},
          {"selector", SelectorName(r.selector)},
          {"ratio", r.ratio}};
}

absl::StatusOr<Selector> SelectorOf(const nlohmann::json& j) {
  Selector s;
  if (!ParseSelector(j.get<std::string>(), &s)) {
    return absl::DataLossError(absl::StrCat("calibration record: unknown selector ", j.dump()));
  }
  return s;
}

absl::StatusOr<GateRecord> FromBody(const nlohmann::json& b) {
  GateRecord r;
  r.version = b.at("version").get<int>();
  r.fingerprint = b.at("fingerprint").get<std::string>();
  r.targets.max_kl = b.at("targets").at("max_kl").get<double>();
  r.targets.min_top1 = b.at("targets").at("min_top1").get<double>();
  r.prompts = b.at("prompts").get<int>();
  for (const auto& c : b.at("candidates")) {
    GateCandidate g;
    ASSIGN_OR_RETURN(g.selector, SelectorOf(c.at("selector")));
    g.ratio = c.at("ratio").get<double>();
    g.kl = c.at("kl").get<double>();
    g.top1 = c.at("top1").get<double>();
    g.meets = c.at("meets").get<bool>();
    r.candidates.push_back(g);
  }
  r.blending = b.at("blending").get<bool>();
  ASSIGN_OR_RETURN(r.selector, SelectorOf(b.at("selector")));
  r.ratio = b.at("ratio").get<double>();
  if (!(r.ratio >= 0 && r.ratio <= 1)) {
    return absl::DataLossError(absl::StrCat("calibration record: ratio ", r.ratio));
  }
  return r;
}

}  // namespace

Agreement QueryAgreement(const float* ref, const float* x, int64_t rows, int vocab) {
  Agreement a;
  if (rows <= 0) return a;
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = ref + r * vocab;
    const float* q = x + r * vocab;
    const float mp = *std::max_element(p, p + vocab), mq = *std::max_element(q, q + vocab);
    double zp = 0, zq = 0;
    for (int v = 0; v < vocab; ++v) zp += std::exp(p[v] - mp), zq += std::exp(q[v] - mq);
    const double lp = mp + std::log(zp), lq = mq + std::log(zq);
    double kl = 0;
    for (int v = 0; v < vocab; ++v) {
      const double a_ = p[v] - lp, b_ = q[v] - lq;
      kl += std::exp(a_) * (a_ - b_);
    }
    a.kl += kl;
    a.top1 += model::Argmax(p, vocab) == model::Argmax(q, vocab);
  }
  a.kl /= static_cast<double>(rows);
  a.top1 /= static_cast<double>(rows);
  return a;
}

absl::StatusOr<GateRecord> Calibrate(const Blender& blender,
                                     const std::vector<CanaryPrompt>& prompts,
                                     const CalibrateOptions& options) {
  if (prompts.empty()) {
    return absl::FailedPreconditionError("calibrate: no canary prompts (corpus empty or too small)");
  }
  std::vector<GateCandidate> cand;
  std::vector<double> ratios = options.ratios;
  std::sort(ratios.begin(), ratios.end());
  for (double r : ratios) {
    for (Selector s : options.selectors) cand.push_back({s, r});
  }
  const int vocab = blender.model().config().vocab_size;
  BlendOptions full;
  full.strategy = Strategy::kFullPrefill;
  for (const CanaryPrompt& p : prompts) {
    ASSIGN_OR_RETURN(Prepared prep, Prepare(blender, p));
    ASSIGN_OR_RETURN(prep.ref, QueryLogitsOf(blender, p, prep, full));
    for (GateCandidate& c : cand) {
      BlendOptions o;
      o.ratio = c.ratio;
      o.selector = c.selector;
      ASSIGN_OR_RETURN(std::vector<float> x, QueryLogitsOf(blender, p, prep, o));
      const Agreement a = QueryAgreement(prep.ref.data(), x.data(),
                                         static_cast<int64_t>(p.query.size()), vocab);
      c.kl += a.kl / static_cast<double>(prompts.size());
      c.top1 += a.top1 / static_cast<double>(prompts.size());
    }
  }
  GateRecord rec;
  rec.fingerprint = blender.model().fingerprint_hex();
  rec.targets = options.targets;
  rec.prompts = static_cast<int>(prompts.size());
  for (GateCandidate& c : cand) {
    c.meets = c.kl <= options.targets.max_kl && c.top1 >= options.targets.min_top1;
    if (c.meets && !rec.blending) {
      rec.blending = true;
      rec.selector = c.selector;
      rec.ratio = c.ratio;
    }
  }
  rec.candidates = std::move(cand);
  return rec;
}

std::string EncodeGateRecord(const GateRecord& record) {
  const nlohmann::json body = Body(record);
  const std::string text = body.dump();
  nlohmann::json out = {{"body", body},
                        {"checksum", absl::StrFormat("fnv1a64:%016x", Fnv1a64(text))}};
  return out.dump(2) + "\n";
}

absl::StatusOr<GateRecord> DecodeGateRecord(const std::string& text,
                                            const std::string& fingerprint) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("body") || !j.contains("checksum")) {
    return absl::DataLossError("calibration record: not a ragkv-calibration JSON object");
  }
  const nlohmann::json& body = j["body"];
  const std::string want = absl::StrFormat("fnv1a64:%016x", Fnv1a64(body.dump()));
  if (!j["checksum"].is_string() || j["checksum"].get<std::string>() != want) {
    return absl::DataLossError("calibration record: checksum mismatch (damaged)");
  }
  if (!body.contains("format") || body["format"] != kFormat) {
    return absl::FailedPreconditionError("calibration record: not format ragkv-calibration");
  }
  if (!body.contains("version") || body["version"] != 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("calibration record: version ", body.value("version", nlohmann::json()).dump(),
                     " (this build reads 1)"));
  }
  absl::StatusOr<GateRecord> r;
  try {
    r = FromBody(body);
  } catch (const nlohmann::json::exception& e) {
    return absl::DataLossError(absl::StrCat("calibration record: ", e.what()));
  }
  if (r.ok() && r->fingerprint != fingerprint) {
    return absl::FailedPreconditionError(absl::StrCat(
        "calibration record is for model ", r->fingerprint, ", not ", fingerprint));
  }
  return r;
}

std::string GateRecordPath(const std::string& data_dir, const std::string& fingerprint) {
  return absl::StrCat(data_dir, "/calibration/", fingerprint, ".json");
}

absl::Status WriteGateRecord(const std::string& data_dir, const GateRecord& record) {
  const std::string path = GateRecordPath(data_dir, record.fingerprint);
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", path, ": ", ec.message()));
  const std::string tmp = path + ".tmp";
  const std::string text = EncodeGateRecord(record);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::ResourceExhaustedError(absl::StrCat("cannot write ", path, " (disk full?)"));
  }
  const int dfd = ::open(std::filesystem::path(path).parent_path().c_str(), O_RDONLY);
  if (dfd >= 0) ::fsync(dfd), ::close(dfd);
  return absl::OkStatus();
}

absl::StatusOr<GateRecord> ReadGateRecord(const std::string& data_dir,
                                          const std::string& fingerprint) {
  const std::string path = GateRecordPath(data_dir, fingerprint);
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("no calibration record ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  absl::StatusOr<GateRecord> r = DecodeGateRecord(ss.str(), fingerprint);
  if (!r.ok()) return absl::Status(r.status().code(), absl::StrCat(path, ": ", r.status().message()));
  return r;
}

GateDecision DecideGate(const absl::StatusOr<GateRecord>& record) {
  GateDecision d;
  if (absl::IsNotFound(record.status())) {
    d.reason = absl::StrFormat(
        "uncalibrated model: default CacheBlend r=%.2f selector=%s (run ragkv calibrate)",
        kUncalibratedRatio, SelectorName(d.selector));
    return d;
  }
  if (!record.ok()) {
    d.source = GateDecision::Source::kUnreadable;
    d.blending = false;
    d.ratio = 0;
    d.reason = absl::StrCat("quality gate: blending off, calibration unreadable: ",
                            record.status().message());
    return d;
  }
  d.source = GateDecision::Source::kCalibrated;
  d.blending = record->blending;
  d.selector = record->selector;
  d.ratio = record->ratio;
  d.reason = record->blending
                 ? absl::StrFormat(
                       "calibrated: r=%.2f selector=%s meets kl<=%g top1>=%g on %d prompts",
                       record->ratio, SelectorName(record->selector), record->targets.max_kl,
                       record->targets.min_top1, record->prompts)
                 : absl::StrFormat(
                       "quality gate: blending off for this model: no setting meets kl<=%g "
                       "top1>=%g on %d prompts; served as full prefill",
                       record->targets.max_kl, record->targets.min_top1, record->prompts);
  return d;
}

}  // namespace ragkv::blend
