// grpc_util.h: the one place absl::Status becomes grpc::Status, and the
// reactor helpers the callback services share. Each helper admits the call
// through the CallGate (auth, rate and in-flight limits; call_gate.h) first
// and keeps its ticket until the call's work is done.
// Private to services/.
#ifndef RAGKV_SERVICES_INTERNAL_GRPC_UTIL_H_
#define RAGKV_SERVICES_INTERNAL_GRPC_UTIL_H_

#include <grpcpp/grpcpp.h>

#include <deque>
#include <exception>
#include <new>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "base/log.h"
#include "base/executor.h"
#include "services/internal/access_log.h"
#include "services/internal/call_gate.h"

namespace ragkv::services::internal {

// ToGrpc: absl and gRPC share code numbering (both follow google.rpc.Code).
inline grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

// Guarded: runs `work` (-> absl::Status) so that no exception reaches
// gRPC's threads (where it would be std::terminate): an allocation failure
// is RESOURCE_EXHAUSTED, any other exception INTERNAL, both named.
template <typename Work>
absl::Status Guarded(Work&& work) {
  try {
    return work();
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("out of memory while serving this request");
  } catch (const std::exception& e) {
    return absl::InternalError(std::string("unexpected exception: ") + e.what());
  } catch (...) {
    return absl::InternalError("unexpected exception");
  }
}

// RunUnary: the standard unary handler body. Admits the call through
// `gate`, checks the deadline, then runs `work` (returning absl::Status, filling the
// response) on `ex` and finishes the reactor with its status.
// RESOURCE_EXHAUSTED when the executor queue is full.
template <typename Work>
grpc::ServerUnaryReactor* RunUnary(grpc::CallbackServerContext* ctx, BoundedExecutor* ex,
                                   CallGate* gate, Work&& work) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  absl::StatusOr<CallGate::Ticket> ticket = gate->Admit(*ctx);
  if (!ticket.ok()) {
    reactor->Finish(ToGrpc(ticket.status()));
    return reactor;
  }
  absl::Status submitted = ex->TrySubmit(
      [ctx, reactor, ticket = std::move(*ticket), work = std::forward<Work>(work),
       rid = RequestIdOf(*ctx)]() mutable {
        ScopedRequestId scoped(rid);
        if (ctx->IsCancelled()) {
          reactor->Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                                       "call cancelled or deadline exceeded before it ran"));
          return;
        }
        grpc::Status status = ToGrpc(Guarded(work));
        ticket = CallGate::Ticket();  // free the slot before the client sees the reply
        reactor->Finish(status);
      });
  if (!submitted.ok()) reactor->Finish(ToGrpc(submitted));
  return reactor;
}

// StreamWriter<Msg>: a ServerWriteReactor fed by a producer thread.
//
// The producer (usually a task on the BoundedExecutor) calls Push() for each
// message and Close() exactly once. Push blocks while `max_buffered` messages
// are waiting (backpressure against slow clients) and returns false once the
// client has gone away (cancel, deadline, disconnect), so the producer stops
// early. Finish is sent only after every pushed message is written. The
// reactor deletes itself in OnDone, which gRPC calls only after Finish, i.e.
// after Close: the producer may use the pointer until it calls Close.
template <typename Msg>
class StreamWriter final : public grpc::ServerWriteReactor<Msg> {
 public:
  explicit StreamWriter(size_t max_buffered = 4) : max_buffered_(max_buffered) {}

  // Push: queues `msg`; false when the client is gone (msg dropped).
  bool Push(Msg msg) {
    mu_.Lock();
    auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return cancelled_ || queue_.size() < max_buffered_;
    };
    mu_.Await(absl::Condition(&room));
    if (cancelled_) {
      mu_.Unlock();
      return false;
    }
    queue_.push_back(std::move(msg));
    Action a = NextActionLocked();
    mu_.Unlock();
    Do(a);
    return true;
  }

  // Offer: as Push but never blocks: with `max_buffered` messages waiting,
  // `msg` replaces the newest of them (for streams of states, where only
  // the latest matters). False when the client is gone.
  bool Offer(Msg msg) {
    mu_.Lock();
    if (cancelled_) {
      mu_.Unlock();
      return false;
    }
    if (queue_.size() >= max_buffered_) {
      queue_.back() = std::move(msg);
    } else {
      queue_.push_back(std::move(msg));
    }
    Action a = NextActionLocked();
    mu_.Unlock();
    Do(a);
    return true;
  }

  // Cancelled: the client went away (pushes are being dropped).
  bool Cancelled() {
    absl::MutexLock lock(&mu_);
    return cancelled_;
  }

  // Close: ends the stream with `status` once queued messages are written.
  // The producer must not touch this object afterwards.
  void Close(grpc::Status status) {
    mu_.Lock();
    closed_ = true;
    final_status_ = std::move(status);
    Action a = NextActionLocked();
    mu_.Unlock();
    // With no action, a write in flight may finish the stream and delete
    // this on a gRPC thread at any moment: not even a member call from here.
    if (a != Action::kNone) Do(a);
  }

  void OnWriteDone(bool ok) override {
    mu_.Lock();
    writing_ = false;
    if (!ok) {
      cancelled_ = true;
      queue_.clear();
    }
    Action a = NextActionLocked();
    mu_.Unlock();
    Do(a);
  }

  void OnCancel() override {
    mu_.Lock();
    cancelled_ = true;
    queue_.clear();
    Action a = NextActionLocked();
    mu_.Unlock();
    Do(a);
  }

  void OnDone() override { delete this; }

 private:
  enum class Action { kNone, kWrite, kFinish };

  Action NextActionLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_) return Action::kNone;
    if (!cancelled_ && !queue_.empty()) {
      current_ = std::move(queue_.front());
      queue_.pop_front();
      writing_ = true;
      return Action::kWrite;
    }
    if (closed_) {
      finished_ = true;
      if (cancelled_ && final_status_.ok()) {
        final_status_ = grpc::Status(grpc::StatusCode::CANCELLED, "client went away");
      }
      return Action::kFinish;
    }
    return Action::kNone;
  }

  // Do: runs the action outside mu_ (reactions may run inline). After
  // kFinish the object may be deleted at any time.
  void Do(Action a) {
    if (a == Action::kWrite) {
      this->StartWrite(&current_);
    } else if (a == Action::kFinish) {
      this->Finish(final_status_);
    }
  }

  const size_t max_buffered_;
  absl::Mutex mu_;
  std::deque<Msg> queue_ ABSL_GUARDED_BY(mu_);
  Msg current_;  // the message being written (owned until OnWriteDone)
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status final_status_;
};

// StartStream: creates a StreamWriter, admits the call through `gate`, and runs
// `producer(StreamWriter<Msg>*)` -> absl::Status on `ex`; the returned
// status closes the stream. Returns the reactor for the handler to return.
template <typename Msg, typename Producer>
grpc::ServerWriteReactor<Msg>* StartStream(grpc::CallbackServerContext* ctx, BoundedExecutor* ex,
                                           CallGate* gate, Producer&& producer) {
  auto* w = new StreamWriter<Msg>();
  absl::StatusOr<CallGate::Ticket> ticket = gate->Admit(*ctx);
  if (!ticket.ok()) {
    w->Close(ToGrpc(ticket.status()));
    return w;
  }
  absl::Status submitted = ex->TrySubmit(
      [w, ticket = std::move(*ticket), producer = std::forward<Producer>(producer),
       rid = RequestIdOf(*ctx)]() mutable {
        ScopedRequestId scoped(rid);
        absl::Status s = Guarded([&] { return producer(w); });
        ticket = CallGate::Ticket();  // free the slot before the client sees the end
        w->Close(ToGrpc(s));
      });
  if (!submitted.ok()) w->Close(ToGrpc(submitted));
  return w;
}

// CollectReader<Req, Resp>: a ServerReadReactor for client streams, on the
// raw method (grpc::ByteBuffer) so that an undecodable message is told
// apart from the client's half-close: gRPC reports both as a failed read on
// a typed method, which used to commit what came before it. Each message is
// parsed on the executor (INVALID_ARGUMENT naming its position when it does
// not parse) and handed to `on_message(Req&&) -> absl::Status` there (it
// may block on storage: PutChunk writes each layer to the store); the next
// read starts only after it returns, so messages are handled one at a time
// and in order, and a slow consumer holds the client back (flow control)
// instead of buffering. After the client half-closes,
// `on_end() -> absl::Status` runs on the executor, fills `*resp`, and its
// status finishes the call. An error from on_message finishes the call at
// once; a call the client cancelled (or whose deadline passed) never runs
// on_end, so a cut stream commits nothing.
template <typename Req, typename Resp>
class CollectReader final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  using OnMessage = absl::AnyInvocable<absl::Status(Req&&)>;
  using OnEnd = absl::AnyInvocable<absl::Status() &&>;

  CollectReader(grpc::CallbackServerContext* ctx, grpc::ByteBuffer* wire_resp,
                std::shared_ptr<Resp> resp, BoundedExecutor* ex, CallGate* gate,
                OnMessage on_message, OnEnd on_end)
      : ctx_(ctx),
        wire_resp_(wire_resp),
        resp_(std::move(resp)),
        ex_(ex),
        on_message_(std::move(on_message)),
        on_end_(std::move(on_end)) {
    absl::StatusOr<CallGate::Ticket> ticket = gate->Admit(*ctx);
    if (!ticket.ok()) {
      this->Finish(ToGrpc(ticket.status()));
      return;
    }
    ticket_ = std::move(*ticket);  // released before Finish, at the latest in OnDone
    this->StartRead(&buf_);
  }

  void OnReadDone(bool ok) override {
    absl::Status s = ok ? ex_->TrySubmit([this]() mutable { Consume(); })
                        : ex_->TrySubmit([this]() mutable { End(); });  // half-close, or gone
    if (!s.ok()) Fail(s);
  }

  void OnDone() override { delete this; }

 private:
  // Consume: the message in buf_, on the executor; then the next read.
  void Consume() {
    ScopedRequestId scoped(RequestIdOf(*ctx_));
    Req msg;
    grpc::Status parsed = grpc::SerializationTraits<Req>::Deserialize(&buf_, &msg);
    if (!parsed.ok()) {
      Fail(absl::InvalidArgumentError(absl::StrFormat(
          "stream message %d is not a valid %s; nothing was committed", received_ + 1,
          Req::descriptor()->full_name())));
      return;
    }
    ++received_;
    absl::Status s = Guarded([&] { return on_message_(std::move(msg)); });
    if (!s.ok()) {
      Fail(s);
      return;
    }
    this->StartRead(&buf_);
  }

  void End() {
    ScopedRequestId scoped(RequestIdOf(*ctx_));
    absl::Status r;
    if (ctx_->IsCancelled()) {
      r = absl::CancelledError("stream cancelled by the client; nothing was committed");
    } else {
      r = Guarded([this] { return std::move(on_end_)(); });
    }
    if (r.ok()) {
      bool own = false;
      grpc::Status w = grpc::SerializationTraits<Resp>::Serialize(*resp_, wire_resp_, &own);
      if (!w.ok()) r = absl::InternalError("cannot serialize the response");
    }
    Fail(r);
  }

  void Fail(const absl::Status& s) {
    ticket_ = CallGate::Ticket();  // free the slot before the reply
    // Drop the callbacks (and the state they hold, e.g. a byte-budget
    // reservation) before the client sees the end, not later in OnDone.
    on_message_ = nullptr;
    on_end_ = nullptr;
    this->Finish(ToGrpc(s));
  }

  grpc::CallbackServerContext* ctx_;
  grpc::ByteBuffer* wire_resp_;
  std::shared_ptr<Resp> resp_;
  BoundedExecutor* ex_;
  OnMessage on_message_;
  OnEnd on_end_;
  grpc::ByteBuffer buf_;
  int received_ = 0;
  CallGate::Ticket ticket_;
};

}  // namespace ragkv::services::internal

#endif  // RAGKV_SERVICES_INTERNAL_GRPC_UTIL_H_
