#include "bench/serve/bench_serve.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <tuple>
#include <utility>
#include <mutex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "bench/model/llamacpp_runner.h"
#include "bench/model/synthetic_gguf.h"
#include "bench/serve/client.h"
#include "bench/serve/internal/servers.h"

namespace ragkv::bench_serve {
namespace fs = std::filesystem;
using internal::RunSettings;
using internal::Server;
namespace {

// Schedule: every request of the run, drawn before any server starts.
struct Schedule {
  std::vector<ServeRequest> warmup;
  std::vector<std::vector<ServeRequest>> cells;  // one per clients level
  std::vector<ServeRequest> repeats, new_questions;
};

Schedule MakeSchedule(const Workload& w, const ServeBenchOptions& o) {
  Schedule s;
  s.warmup = w.Draw(o.warmup, 0);
  for (size_t i = 0; i < o.clients.size(); ++i) s.cells.push_back(w.Draw(o.requests, 100 + i));
  s.repeats = w.Draw(o.repeats, 200);
  for (int i = 0; i < o.repeats; ++i)
    s.new_questions.push_back(w.NewQuestion(s.repeats[i], 300 + i));
  return s;
}

// UsedPassages: the pool indices of every passage the schedule sends.
std::vector<int> UsedPassages(const Schedule& s) {
  std::set<int> used;
  auto add = [&](const std::vector<ServeRequest>& rs) {
    for (const ServeRequest& r : rs) used.insert(r.passages.begin(), r.passages.end());
  };
  add(s.warmup);
  for (const auto& c : s.cells) add(c);
  add(s.repeats);
  return std::vector<int>(used.begin(), used.end());
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(std::ceil(q * v.size()));
  return v[std::clamp<size_t>(i, 1, v.size()) - 1];
}

// Summarize: a cell's figures from its requests' results and wall time.
CellResult Summarize(const std::string& server, const std::string& workload, int clients,
                     const std::vector<StreamResult>& rs, double wall_s) {
  CellResult c;
  c.server = server;
  c.workload = workload;
  c.clients = clients;
  c.requests = static_cast<int>(rs.size());
  std::vector<double> ttft, e2e, tok_s, blend, prefill, recomputed, prefilled;
  double cached = 0, prompt = 0, gain = 0, stored = 0;
  int stored_n = 0;
  for (const StreamResult& r : rs) {
    c.first_content.push_back(r.ok ? r.first_content : "");
    if (!r.ok) {
      if (c.errors++ == 0) c.first_error = r.error;
      continue;
    }
    ttft.push_back(r.ttft_ms);
    e2e.push_back(r.e2e_ms);
    if (r.completion_tokens > 1 && r.e2e_ms > r.ttft_ms) {
      tok_s.push_back((r.completion_tokens - 1) / ((r.e2e_ms - r.ttft_ms) / 1000.0));
    }
    cached += r.cached_tokens;
    prompt += r.prompt_tokens;
    if (r.reorder_before >= 0) {
      ++c.reorder_runs;
      c.reorder_hits += r.reorder_after > r.reorder_before;
      gain += r.reorder_after - r.reorder_before;
    }
    if (r.stored_prefix_tokens >= 0) {
      ++stored_n;
      stored += r.stored_prefix_tokens;
    }
    if (r.blend_ms >= 0) {
      blend.push_back(r.blend_ms);
      prefill.push_back(r.prefill_ms);
      recomputed.push_back(r.recomputed_tokens);
      prefilled.push_back(r.prefilled_tokens);
    }
  }
  if (!blend.empty()) {
    c.blend_p50_ms = Percentile(blend, 0.5);
    c.prefill_p50_ms = Percentile(prefill, 0.5);
    c.recomputed_p50 = Percentile(recomputed, 0.5);
    c.prefilled_p50 = Percentile(prefilled, 0.5);
  }
  if (c.reorder_runs > 0) c.reorder_gain_mean = gain / c.reorder_runs;
  if (stored_n > 0) c.stored_prefix_mean = stored / stored_n;
  c.ttft_p50_ms = Percentile(ttft, 0.5);
  c.ttft_p99_ms = Percentile(ttft, 0.99);
  c.e2e_p50_ms = Percentile(e2e, 0.5);
  c.rps = wall_s > 0 ? ttft.size() / wall_s : 0;
  c.out_tok_s = Percentile(tok_s, 0.5);
  c.cached_frac = prompt > 0 ? cached / prompt : 0;
  c.mean_prompt_tokens = ttft.empty() ? 0 : prompt / ttft.size();
  return c;
}

// ClosedLoop: `clients` threads send `rs` (each takes the next) until all
// are done; results by request index; *wall_s: first send to last answer.
std::vector<StreamResult> ClosedLoop(Server& srv, const Workload& w,
                                     const std::vector<ServeRequest>& rs, int clients,
                                     double timeout_s, std::ostream& progress, double* wall_s) {
  std::vector<StreamResult> out(rs.size());
  std::atomic<size_t> next{0};
  std::mutex mu;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&] {
      for (size_t i; (i = next++) < rs.size();) {
        out[i] = StreamChat(srv.port, ChatBody(w, rs[i], srv.body), timeout_s);
        std::lock_guard<std::mutex> l(mu);
        progress << absl::StrFormat(
                        "bench serve:   %s #%d %s ttft=%.0fms e2e=%.0fms cached=%d/%d%s\n",
                        srv.name, static_cast<int>(i), rs[i].documents ? "documents" : "pasted",
                        out[i].ttft_ms, out[i].e2e_ms, out[i].cached_tokens, out[i].prompt_tokens,
                        out[i].ok ? "" : " ERROR " + out[i].error)
                 << std::flush;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  *wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  srv.max_rss_mb = std::max(srv.max_rss_mb, srv.child->RssMb());
  return out;
}

// WarmRagkv: the run's passages into "ragkv"'s store: `ragkv precompute` of
// a corpus of them, which serves them pasted and as `documents` alike (the
// sidecar finds the chunks in the prompt by their tokens). Not measured.
absl::Status WarmRagkv(Server& srv, const Workload& w, const Schedule& sched,
                       const RunSettings& s, std::ostream& progress, ServeBenchReport* rep) {
  const std::vector<int> used = UsedPassages(sched);
  std::vector<std::string> texts;
  for (int p : used) texts.push_back(w.pool()[p]);
  ASSIGN_OR_RETURN(double secs, internal::Precompute(srv, texts, s, progress));
  rep->notes.push_back(absl::StrFormat("ragkv warm-up of the run's %d passages: ragkv precompute %.1f s",
                                       static_cast<int>(used.size()), secs));
  return absl::OkStatus();
}

// RunRepeats: per pair, a fresh request (not measured), the same again and
// the same passages with a new question (both measured), one client.
void RunRepeats(Server& srv, const Workload& w, const Schedule& s, const ServeBenchOptions& o,
                std::ostream& progress, ServeBenchReport* rep) {
  std::vector<StreamResult> same, newq;
  double wall_same = 0, wall_newq = 0, unused = 0;
  for (size_t i = 0; i < s.repeats.size(); ++i) {
    const std::vector<ServeRequest> one = {s.repeats[i]}, two = {s.new_questions[i]};
    ClosedLoop(srv, w, one, 1, o.request_timeout_s, progress, &unused);
    double t = 0;
    same.push_back(ClosedLoop(srv, w, one, 1, o.request_timeout_s, progress, &t)[0]);
    wall_same += t;
    newq.push_back(ClosedLoop(srv, w, two, 1, o.request_timeout_s, progress, &t)[0]);
    wall_newq += t;
  }
  rep->cells.push_back(Summarize(srv.name, "same-prompt", 1, same, wall_same));
  rep->cells.push_back(Summarize(srv.name, "new-question", 1, newq, wall_newq));
}

// Agreement: first generated token of `server` vs "ragkv-local", request
// by request over every cell both ran.
std::pair<double, int> Agreement(const ServeBenchReport& rep, const std::string& server) {
  std::map<std::string, const CellResult*> local;
  for (const CellResult& c : rep.cells) {
    if (c.server == "ragkv-local") local[absl::StrCat(c.workload, "/", c.clients)] = &c;
  }
  int n = 0, agree = 0;
  for (const CellResult& c : rep.cells) {
    auto it = local.find(absl::StrCat(c.workload, "/", c.clients));
    if (c.server != server || it == local.end()) continue;
    for (size_t i = 0; i < c.first_content.size() && i < it->second->first_content.size(); ++i) {
      if (c.first_content[i].empty() || it->second->first_content[i].empty()) continue;
      ++n;
      agree += c.first_content[i] == it->second->first_content[i];
    }
  }
  return {n > 0 ? static_cast<double>(agree) / n : -1, n};
}

void Agreements(ServeBenchReport* rep) {
  std::tie(rep->first_token_agreement, rep->agreement_n) = Agreement(*rep, "ragkv");
  for (const char* other : {"ragkv-reorder", "ragkv-first"}) {
    const auto a = Agreement(*rep, other);
    if (a.second > 0) rep->agreements.push_back({other, a});
  }
}

// Prepare: the model file, the workload, the settings and the notes.
absl::StatusOr<RunSettings> Prepare(const ServeBenchOptions& o, std::ostream& progress,
                                    ServeBenchReport* rep) {
  RunSettings s;
  s.work_dir = o.work_dir;
  s.ragkv_bin = o.ragkv_bin.empty() ? internal::DefaultRagkvBin() : o.ragkv_bin;
  s.llama_server = o.llama_server.empty() ? internal::DefaultLlamaServer() : o.llama_server;
  fs::create_directories(s.work_dir + "/corpus");
  s.gguf = o.model;
  if (s.gguf.empty()) {
    s.gguf = s.work_dir + "/synthetic-" + o.encoding + ".gguf";
    progress << "bench serve: writing " << o.synthetic << " as " << o.encoding << " GGUF"
             << std::endl;
    // A moe: or gemma3: spec (bench/model/synthetic_gguf.h) is passed as is.
    const std::string spec =
        model::IsRandomSpec(o.synthetic) ? o.synthetic : "synthetic:" + o.synthetic;
    RETURN_IF_ERROR(model::WriteSyntheticGguf(spec, o.encoding,
                                              model::LlamaCppRunner::DefaultLibDir(), s.gguf));
  }
  ASSIGN_OR_RETURN(s.banned, BannedTokens(s.gguf));
  rep->notes.push_back(absl::StrCat(
      "logit_bias -100 on ", s.banned.size(),
      " tokens (byte tokens that are not UTF-8 alone, and control tokens: EOS, BOS, unk), "
      "the same for every server"));
  return s;
}

// StartServers: every named server started (llama-server skipped with a
// note when its binary is missing), "ragkv" warmed.
absl::StatusOr<std::vector<Server>> StartServers(const ServeBenchOptions& o, const RunSettings& s,
                                                 const Workload& w, const Schedule& sched,
                                                 std::ostream& progress, ServeBenchReport* rep) {
  std::vector<Server> servers;
  for (const std::string& name : o.servers) {
    if (name == "llama-server" && !fs::exists(s.llama_server)) {
      rep->notes.push_back("llama-server skipped: no binary at " + s.llama_server +
                           " (scripts/setup-llamacpp --server builds it)");
      continue;
    }
    ASSIGN_OR_RETURN(Server srv, internal::StartServer(name, o, s, progress));
    if ((name == "ragkv" || name == "ragkv-reorder" || name == "ragkv-first") && o.precompute) {
      RETURN_IF_ERROR(WarmRagkv(srv, w, sched, s, progress, rep));
    }
    servers.push_back(std::move(srv));
  }
  return servers;
}

// Quiesce: until every server uses under 0.05 cores over one second (at
// most 30 min), so no server's background work (ragkv's store-back of the
// warm-up documents) runs during another's timed step.
void Quiesce(std::vector<Server>& servers, std::ostream& progress) {
  for (int i = 0; i < 1800; ++i) {
    std::vector<double> before;
    for (Server& srv : servers) before.push_back(srv.child->CpuSeconds());
    std::this_thread::sleep_for(std::chrono::seconds(1));
    bool idle = true;
    for (size_t k = 0; k < servers.size(); ++k) {
      idle = idle && servers[k].child->CpuSeconds() - before[k] < 0.05;
    }
    if (idle) return;
    if (i % 30 == 29) progress << "bench serve: waiting for the servers to be idle" << std::endl;
  }
}

// FirstPositionNote: the first-position records' lookups of a
// --first-position-records server over the whole run (warm-up included),
// from its /metrics.
std::string FirstPositionNote(const Server& srv) {
  const auto [status, text] = HttpGet(srv.port, "/metrics");
  std::string out = srv.name + " first-position records over the run (warm-up included):";
  for (const char* result : {"hit", "miss", "unused"}) {
    const std::string key =
        absl::StrCat("ragkv_first_position_records_total{result=\"", result, "\"} ");
    const size_t at = status == 200 ? text.find(key) : std::string::npos;
    const double n = at == std::string::npos ? 0 : std::atof(text.c_str() + at + key.size());
    absl::StrAppendFormat(&out, " %s %.0f", result, n);
  }
  if (status != 200)
    absl::StrAppendFormat(&out, " (GET /metrics: %d %s)", status, text.substr(0, 80));
  return out;
}

// RunCells: the warm-up pass, then each recombining cell on every server in
// turn, then the repeat cases, each after the servers are idle; the servers
// are stopped after.
void RunCells(std::vector<Server>& servers, const Workload& w, const Schedule& sched,
              const ServeBenchOptions& o, std::ostream& progress, ServeBenchReport* rep) {
  double unused = 0;
  progress << "bench serve: waiting until every server is idle" << std::endl;
  Quiesce(servers, progress);
  for (Server& srv : servers) {
    progress << "bench serve: warm-up " << srv.name << std::endl;
    ClosedLoop(srv, w, sched.warmup, 1, o.request_timeout_s, progress, &unused);
  }
  for (size_t i = 0; i < o.clients.size(); ++i) {
    for (Server& srv : servers) {
      Quiesce(servers, progress);
      progress << "bench serve: " << srv.name << " recombine clients=" << o.clients[i] << std::endl;
      double wall = 0;
      auto rs =
          ClosedLoop(srv, w, sched.cells[i], o.clients[i], o.request_timeout_s, progress, &wall);
      rep->cells.push_back(Summarize(srv.name, "recombine", o.clients[i], rs, wall));
    }
  }
  for (Server& srv : servers) {
    Quiesce(servers, progress);
    if (o.repeats > 0) RunRepeats(srv, w, sched, o, progress, rep);
  }
  for (Server& srv : servers) {
    rep->notes.push_back(absl::StrFormat("%s peak RSS seen %.0f MiB", srv.name, srv.max_rss_mb));
    if (srv.name == "ragkv-first") rep->notes.push_back(FirstPositionNote(srv));
    srv.child->Stop();
  }
}

std::string Describe(const ServeBenchOptions& o, const RunSettings& s, const Workload& w) {
  return absl::StrFormat(
      "model %s; pool %d passages (mean %.0f tokens, cut at %d), k=%d, Zipf s=%.2f, %.0f%% of "
      "requests as documents; %d warm-up, %d per cell, %d repeat pairs; %d slots x %d ctx, %d "
      "threads, %d output tokens, temperature 0",
      fs::path(s.gguf).filename().string(), static_cast<int>(w.pool().size()),
      w.mean_passage_tokens(), o.workload.passage_tokens, o.workload.k, o.workload.zipf_s,
      100 * o.workload.documents_share, o.warmup, o.requests, o.repeats, o.slots, o.ctx_per_slot,
      o.threads, o.max_tokens);
}

}  // namespace

absl::StatusOr<ServeBenchReport> RunServeBench(const ServeBenchOptions& opts,
                                               std::ostream& progress) {
  ServeBenchOptions o = opts;
  const bool own_dir = o.work_dir.empty();
  if (own_dir) {
    o.work_dir =
        (fs::temp_directory_path() / absl::StrCat("ragkv-bench-serve-", ::getpid())).string();
  }
  ServeBenchReport rep;
  ASSIGN_OR_RETURN(RunSettings s, Prepare(o, progress, &rep));
  o.workload.tokenizer_model = s.gguf;
  ASSIGN_OR_RETURN(Workload w, Workload::Load(o.workload));
  const Schedule sched = MakeSchedule(w, o);
  rep.description = Describe(o, s, w);
  progress << "bench serve: " << rep.description << std::endl;
  ASSIGN_OR_RETURN(std::vector<Server> servers, StartServers(o, s, w, sched, progress, &rep));
  RunCells(servers, w, sched, o, progress, &rep);
  for (const CellResult& c : rep.cells) rep.total_errors += c.errors;
  Agreements(&rep);
  if (own_dir) fs::remove_all(o.work_dir);
  return rep;
}

}  // namespace ragkv::bench_serve
