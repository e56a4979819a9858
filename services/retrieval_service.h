// retrieval_service.h: RetrievalServiceImpl, ragkv.v1.RetrievalService over
// retrieval::Retriever (ingest, delete, search, chunk records). Chunk KV
// keys are ChunkKey::Of(served model fingerprint, chunk tokens), computed
// on the fly (empty when no model is loaded). Work runs on the executor.
// Thread safety: stateless; gRPC calls it concurrently.
#ifndef RAGKV_SERVICES_RETRIEVAL_SERVICE_H_
#define RAGKV_SERVICES_RETRIEVAL_SERVICE_H_

#include "ragkv/v1/retrieval.grpc.pb.h"
#include "services/service_context.h"

namespace ragkv::services {

// IngestDocuments runs on the raw (ByteBuffer) method: see CollectReader.
class RetrievalServiceImpl final
    : public v1::RetrievalService::WithRawCallbackMethod_IngestDocuments<
          v1::RetrievalService::CallbackService> {
 public:
  explicit RetrievalServiceImpl(const ServiceContext* ctx) : ctx_(ctx) {}

  // IngestDocuments: all or nothing. Every document of the stream is
  // added, or replaces the stored one of its doc_id, in one atomic catalogue
  // write after the client half-closes; an undecodable or invalid message,
  // a cancelled stream or a failed write commits nothing.
  grpc::ServerReadReactor<grpc::ByteBuffer>* IngestDocuments(grpc::CallbackServerContext* c,
                                                             grpc::ByteBuffer* resp) override;
  grpc::ServerUnaryReactor* DeleteDocument(grpc::CallbackServerContext* c,
                                           const v1::DeleteDocumentRequest* req,
                                           v1::DeleteDocumentResponse* resp) override;
  grpc::ServerUnaryReactor* Search(grpc::CallbackServerContext* c, const v1::SearchRequest* req,
                                   v1::SearchResponse* resp) override;
  grpc::ServerUnaryReactor* GetChunks(grpc::CallbackServerContext* c,
                                      const v1::GetChunksRequest* req,
                                      v1::GetChunksResponse* resp) override;
  grpc::ServerUnaryReactor* ChunkDocuments(grpc::CallbackServerContext* c,
                                           const v1::ChunkDocumentsRequest* req,
                                           v1::ChunkDocumentsResponse* resp) override;

 private:
  const ServiceContext* ctx_;
};

}  // namespace ragkv::services

#endif  // RAGKV_SERVICES_RETRIEVAL_SERVICE_H_
