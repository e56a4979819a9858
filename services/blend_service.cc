// blend_service.cc: ragkv.v1.BlendService over the request pipeline
// (pipeline/pipeline.h): the request's proto shapes become a
// pipeline::Prompt and RequestOptions, and a GrpcLayerSink streams what the
// pipeline delivers (header, layers, restarts), then the summary.
#include "services/blend_service.h"

#include <string>
#include <utility>
#include <vector>

#include "base/status_macros.h"
#include "connector/wire.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "pipeline/pipeline.h"
#include "services/internal/grpc_util.h"
#include "services/internal/validate.h"

namespace ragkv::services {
namespace {

using Writer = internal::StreamWriter<v1::BlendResponse>;

// ToPrompt: the request's segments (or raw ids) as the pipeline's prompt.
pipeline::Prompt ToPrompt(const google::protobuf::RepeatedPtrField<v1::Segment>& segments,
                          const v1::RawPrompt* raw) {
  pipeline::Prompt p;
  if (raw != nullptr) {
    p.raw.assign(raw->ids().begin(), raw->ids().end());
    p.raw_query_tokens = raw->query_tokens();
    for (const v1::TokenSpan& t : raw->passages()) p.passages.emplace_back(t.begin(), t.end());
    return p;
  }
  for (const v1::Segment& s : segments) {
    pipeline::Segment& out = p.segments.emplace_back();
    switch (s.source_case()) {
      case v1::Segment::kChunkId:
        out.source = pipeline::Segment::Source::kChunkId;
        out.chunk_id = s.chunk_id();
        break;
      case v1::Segment::kText:
        out.source = pipeline::Segment::Source::kText;
        out.text = s.text();
        break;
      default:  // tokens (validated: every segment has a source)
        out.source = pipeline::Segment::Source::kTokens;
        out.tokens.assign(s.tokens().ids().begin(), s.tokens().ids().end());
    }
    out.document = s.document() && s.source_case() != v1::Segment::kChunkId;
  }
  return p;
}

pipeline::RequestOptions ToOptions(const v1::BlendOptions& o, double retrieve_ms) {
  pipeline::RequestOptions ro;
  switch (o.mode()) {
    case v1::BLEND_MODE_FULL_PREFILL: ro.mode = pipeline::Mode::kFullPrefill; break;
    case v1::BLEND_MODE_PREFIX_CACHING: ro.mode = pipeline::Mode::kPrefixReuse; break;
    case v1::BLEND_MODE_FULL_REUSE: ro.mode = pipeline::Mode::kFullReuse; break;
    case v1::BLEND_MODE_AUTO: ro.mode = pipeline::Mode::kAuto; break;
    default: ro.mode = pipeline::Mode::kCacheBlend;
  }
  ro.ratio = o.recompute_ratio();
  if (!o.selector().empty()) {
    blend::Selector s;
    if (blend::ParseSelector(o.selector(), &s)) ro.selector = s;  // validated before
  }
  ro.chunk_head_tokens = static_cast<int>(o.chunk_head_tokens());
  ro.lookahead_layers = static_cast<int>(o.lookahead_layers());
  ro.adaptive_mass = o.adaptive_mass();
  ro.adaptive_threshold = o.adaptive_threshold();
  ro.adaptive_budget = o.adaptive_budget();
  ro.add_bos = o.add_bos();
  ro.accept_restart = o.accept_restart();
  ro.cache_salt = o.cache_salt();
  ro.not_found_when_cold = o.not_found_when_cold();
  ro.retrieve_ms = retrieve_ms;
  return ro;
}

v1::FailedLoad ToWire(const pipeline::FailedLoad& f) {
  v1::FailedLoad w;
  w.set_span(f.span);
  w.set_chunk_id(f.chunk_id);
  w.set_layer(f.layer);
  w.set_reason(f.reason);
  return w;
}

// GrpcLayerSink: the pipeline's layers as BlendResponse messages: the
// header (KV layout in out_dtype, tokens, spans, retrieved ids), each layer
// exported with its checksum and recomputed-row mask, restarts.
class GrpcLayerSink final : public pipeline::LayerSink {
 public:
  GrpcLayerSink(const ServiceContext* ctx, kernels::DType out_dtype,
                std::vector<uint64_t> retrieved, Writer* w)
      : ctx_(ctx), out_dtype_(out_dtype), retrieved_(std::move(retrieved)), w_(w) {}

  absl::Status OnPrompt(const pipeline::PromptInfo& prompt) override {
    const model::ModelConfig& mc = ctx_->model->config();
    T_ = static_cast<int64_t>(prompt.tokens.size());
    bytes_ = static_cast<size_t>(mc.n_kv_heads) * T_ * mc.head_dim * kernels::DTypeSize(out_dtype_);
    v1::BlendResponse msg;
    v1::BlendHeader* header = msg.mutable_header();
    v1::KVLayout* layout = header->mutable_layout();
    layout->set_num_layers(mc.n_layers);
    layout->set_num_kv_heads(mc.n_kv_heads);
    layout->set_head_dim(mc.head_dim);
    layout->set_num_tokens(static_cast<uint32_t>(T_));
    layout->set_dtype(wire::ToProto(out_dtype_));
    layout->set_model_fingerprint(wire::FingerprintBytes(ctx_->model->fingerprint()));
    header->mutable_token_ids()->Add(prompt.tokens.begin(), prompt.tokens.end());
    for (const pipeline::Span& s : prompt.spans) {
      v1::SegmentSpan* sp = header->add_spans();
      sp->set_begin(s.begin);
      sp->set_end(s.end);
      sp->set_chunk_id(s.chunk_id);
      sp->set_is_chunk(s.is_chunk);
      sp->set_chunk_begin(s.chunk_begin);
      sp->set_cache_hit(s.cache_hit);
    }
    for (uint64_t id : retrieved_) header->add_retrieved_chunk_ids(id);
    return Push(std::move(msg));
  }

  absl::Status OnLayer(int l, const model::KVCache& cache,
                       absl::Span<const int32_t> rows) override {
    v1::BlendResponse m;
    v1::BlendLayer* bl = m.mutable_layer();
    v1::LayerKV* kv = bl->mutable_kv();
    kv->set_layer(l);
    kv->mutable_k()->resize(bytes_);
    kv->mutable_v()->resize(bytes_);
    RETURN_IF_ERROR(cache.ExportLayer(l, 0, T_, out_dtype_, kv->mutable_k()->data(),
                                      kv->mutable_v()->data()));
    kv->set_checksum(wire::LayerChecksum(kv->k(), kv->v()));
    std::string mask((T_ + 7) / 8, '\0');
    for (int32_t row : rows) {
      if (row >= 0 && row < T_) mask[row / 8] |= static_cast<char>(1u << (row % 8));
    }
    bl->set_recomputed_mask(std::move(mask));
    return Push(std::move(m));
  }

  absl::Status OnRestart(const pipeline::FailedLoad& f) override {
    v1::BlendResponse m;
    *m.mutable_restart()->mutable_failed() = ToWire(f);
    return Push(std::move(m));
  }

  // Summary: the request's summary message.
  absl::Status Summary(const pipeline::RequestResult& r) {
    v1::BlendResponse sm;
    v1::BlendSummary* s = sm.mutable_summary();
    s->set_recomputed_tokens(static_cast<uint32_t>(r.mean_recomputed + 0.5));
    s->set_effective_ratio(r.tokens > 0 ? static_cast<float>(r.mean_recomputed / r.tokens) : 0.f);
    s->set_ratio(static_cast<float>(r.ratio));
    s->set_controller_reason(r.controller_reason);
    s->set_quality_gate(r.gate_reason);
    for (const pipeline::FailedLoad& f : r.failed) *s->add_failed_loads() = ToWire(f);
    s->set_prefix_tokens(static_cast<uint32_t>(r.prefix_tokens));
    for (const auto& [stage, ms] : {std::pair{"retrieve", r.ms.retrieve}, {"fetch", r.ms.fetch},
                                    {"blend", r.ms.blend}, {"recompute", r.ms.recompute},
                                    {"total", r.ms.total}}) {
      v1::StageTiming* t = s->add_timings();
      t->set_stage(stage);
      t->set_ms(ms);
    }
    return Push(std::move(sm));
  }

 private:
  absl::Status Push(v1::BlendResponse m) {
    if (!w_->Push(std::move(m))) return absl::CancelledError("client went away");
    return absl::OkStatus();
  }

  const ServiceContext* ctx_;
  const kernels::DType out_dtype_;
  const std::vector<uint64_t> retrieved_;
  Writer* w_;
  int64_t T_ = 0;
  size_t bytes_ = 0;  // one layer's K (or V) in out_dtype
};

// RunBlend: the prompt through the pipeline, streamed into `w`: header,
// layers, summary.
absl::Status RunBlend(const ServiceContext* ctx, const pipeline::Prompt& prompt,
                      const v1::BlendOptions& opts, std::vector<uint64_t> retrieved,
                      double retrieve_ms, Writer* w) {
  if (ctx->pipeline == nullptr) {
    return absl::FailedPreconditionError("this server has no model loaded (--model)");
  }
  kernels::DType out_dtype = kernels::DType::kF32;
  if (opts.output_dtype() != v1::DTYPE_UNSPECIFIED) {
    ASSIGN_OR_RETURN(out_dtype, wire::KernelDTypeFromProto(opts.output_dtype()));
  }
  GrpcLayerSink sink(ctx, out_dtype, std::move(retrieved), w);
  ASSIGN_OR_RETURN(const pipeline::RequestResult r,
                   ctx->pipeline->Run(prompt, ToOptions(opts, retrieve_ms), &sink));
  return sink.Summary(r);
}

}  // namespace

grpc::ServerWriteReactor<v1::BlendResponse>* BlendServiceImpl::Blend(
    grpc::CallbackServerContext* c, const v1::BlendRequest* req) {
  return internal::StartStream<v1::BlendResponse>(
      c, ctx_->executor, ctx_->gate, [this, req](Writer* w) -> absl::Status {
        RETURN_IF_ERROR(internal::ValidateBlendRequest(
            *req, ctx_->model != nullptr ? ctx_->model->config().vocab_size : 0));
        const pipeline::Prompt prompt =
            ToPrompt(req->segments(), req->has_raw() ? &req->raw() : nullptr);
        return RunBlend(ctx_, prompt, req->options(), {}, 0, w);
      });
}

grpc::ServerWriteReactor<v1::BlendResponse>* BlendServiceImpl::RetrieveAndBlend(
    grpc::CallbackServerContext* c, const v1::RetrieveAndBlendRequest* req) {
  return internal::StartStream<v1::BlendResponse>(
      c, ctx_->executor, ctx_->gate, [this, req](Writer* w) -> absl::Status {
        RETURN_IF_ERROR(internal::ValidateRetrieveAndBlendRequest(*req));
        if (ctx_->pipeline == nullptr) {
          return absl::FailedPreconditionError("this server has no model loaded (--model)");
        }
        ASSIGN_OR_RETURN(pipeline::Pipeline::Retrieved r,
                         ctx_->pipeline->Retrieve(req->query(), static_cast<int>(req->k()),
                                                  req->system_prompt()));
        return RunBlend(ctx_, r.prompt, req->options(), std::move(r.chunk_ids), r.retrieve_ms, w);
      });
}

}  // namespace ragkv::services
