// kvstore_service.h: KVStoreServiceImpl, ragkv.v1.KVStoreService over
// kvstore::TieredStore (callback API; reads and writes run on the executor).
//
// Wire <-> store: the wire carries raw K/V in the chunk's dtype; GetChunk
// sends kRaw records as stored (zero conversion) and decodes other codecs
// (int8, zstd) to f32; PutChunk encodes raw records (kv_chunk.h, codec
// kRaw). Fingerprint mismatches and unknown keys are NOT_FOUND.
// Thread safety: gRPC calls it concurrently; it holds no mutable state.
#ifndef RAGKV_SERVICES_KVSTORE_SERVICE_H_
#define RAGKV_SERVICES_KVSTORE_SERVICE_H_

#include "ragkv/v1/kvstore.grpc.pb.h"
#include "services/service_context.h"

namespace ragkv::services {

// PutChunk runs on the raw (ByteBuffer) method: see CollectReader.
class KVStoreServiceImpl final
    : public v1::KVStoreService::WithRawCallbackMethod_PutChunk<
          v1::KVStoreService::CallbackService> {
 public:
  explicit KVStoreServiceImpl(const ServiceContext* ctx) : ctx_(ctx) {}

  grpc::ServerUnaryReactor* Lookup(grpc::CallbackServerContext* c, const v1::LookupRequest* req,
                                   v1::LookupResponse* resp) override;
  grpc::ServerUnaryReactor* Contains(grpc::CallbackServerContext* c,
                                     const v1::ContainsRequest* req,
                                     v1::ContainsResponse* resp) override;
  grpc::ServerWriteReactor<v1::KVRecord>* GetChunk(grpc::CallbackServerContext* c,
                                                   const v1::GetChunkRequest* req) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* PutChunk(grpc::CallbackServerContext* c,
                                                      grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* DeleteChunks(grpc::CallbackServerContext* c,
                                         const v1::DeleteChunksRequest* req,
                                         v1::DeleteChunksResponse* resp) override;
  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* c,
                                     const v1::GetStatsRequest* req,
                                     v1::StoreStats* resp) override;

 private:
  const ServiceContext* ctx_;
};

}  // namespace ragkv::services

#endif  // RAGKV_SERVICES_KVSTORE_SERVICE_H_
