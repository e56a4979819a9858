#include "retrieval/catalogue.h"

#include <rocksdb/db.h>
#include <rocksdb/listener.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <shared_mutex>

#include "absl/strings/str_cat.h"
#include "base/rocksdb_glue.h"
#include "base/status_macros.h"
#include "retrieval/internal/codec.h"

namespace ragkv::retrieval {
namespace {

constexpr uint8_t kRecordVersion = 1;
constexpr const char* kFamilies[] = {"docs", "chunks", "vectors", "meta"};
enum Family { kDocs = 0, kChunks = 1, kVectors = 2, kMeta = 3 };

// The one place rocksdb::Status is translated.
absl::Status FromRocks(const rocksdb::Status& s, absl::string_view what) {
  if (s.ok()) return absl::OkStatus();
  const std::string msg = absl::StrCat("catalogue ", what, ": ", s.ToString());
  if (s.IsNoSpace()) return absl::ResourceExhaustedError(msg);  // disk full: not retryable as is
  if (s.IsCorruption()) {
    return absl::DataLossError(absl::StrCat(
        msg, " -- the catalogue is damaged; `ragkv repair --data-dir DIR` salvages what can be "
        "read (and reports what was lost), or move it away and re-ingest the corpus"));
  }
  if (s.IsNotFound()) return absl::NotFoundError(msg);
  if (s.IsInvalidArgument()) return absl::InvalidArgumentError(msg);
  if (s.IsIOError()) return absl::UnavailableError(msg);
  return absl::InternalError(msg);
}

std::string EncodeDocument(const DocumentRecord& d) {
  internal::Encoder e;
  e.U8(kRecordVersion);
  e.Bytes(d.doc_id);
  e.Bytes(d.title);
  e.U64(d.text_bytes);
  e.U64(d.text_hash);
  e.I64Array(d.chunk_ids);
  return std::move(e.str());
}

absl::StatusOr<DocumentRecord> DecodeDocument(std::string_view v) {
  internal::Decoder d(v);
  DocumentRecord r;
  uint8_t version;
  if (!d.U8(&version) || version != kRecordVersion || !d.Bytes(&r.doc_id) || !d.Bytes(&r.title) ||
      !d.U64(&r.text_bytes) || !d.U64(&r.text_hash) || !d.I64Array(&r.chunk_ids) || !d.done()) {
    return absl::DataLossError("catalogue: undecodable document record");
  }
  return r;
}

std::string EncodeChunk(const ChunkRecord& c) {
  internal::Encoder e;
  e.U8(kRecordVersion);
  e.I64(c.chunk_id);
  e.Bytes(c.doc_id);
  e.U32(static_cast<uint32_t>(c.ordinal));
  e.U64(c.byte_begin);
  e.U64(c.byte_end);
  e.U64(c.token_begin);
  e.I32Array(c.token_ids);
  e.Bytes(c.text);
  e.Bytes(c.kv_key);
  return std::move(e.str());
}

absl::StatusOr<ChunkRecord> DecodeChunk(std::string_view v) {
  internal::Decoder d(v);
  ChunkRecord r;
  uint8_t version;
  uint32_t ordinal;
  if (!d.U8(&version) || version != kRecordVersion || !d.I64(&r.chunk_id) || !d.Bytes(&r.doc_id) ||
      !d.U32(&ordinal) || !d.U64(&r.byte_begin) || !d.U64(&r.byte_end) || !d.U64(&r.token_begin) ||
      !d.I32Array(&r.token_ids) || !d.Bytes(&r.text) || !d.Bytes(&r.kv_key) || !d.done()) {
    return absl::DataLossError("catalogue: undecodable chunk record");
  }
  r.ordinal = static_cast<int32_t>(ordinal);
  return r;
}

std::string EncodeVector(absl::Span<const float> v) {
  std::string s(1, static_cast<char>(kRecordVersion));
  s.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  return s;
}

bool VectorPayload(std::string_view v, absl::Span<const float>* out, std::vector<float>* buf) {
  if (v.empty() || static_cast<uint8_t>(v[0]) != kRecordVersion || (v.size() - 1) % sizeof(float) != 0) {
    return false;
  }
  buf->resize((v.size() - 1) / sizeof(float));
  std::memcpy(buf->data(), v.data() + 1, v.size() - 1);
  *out = absl::MakeConstSpan(*buf);
  return true;
}


rocksdb::Options DbOptions(const CatalogueOptions& options) {
  rocksdb::Options db_opts;
  db_opts.create_if_missing = options.create_if_missing;
  db_opts.create_missing_column_families = true;
  db_opts.max_background_jobs = 1;  // small machines; the catalogue is not hot
  db_opts.paranoid_checks = true;
  // The catalogue is the source of truth: a torn last record (kill -9
  // mid-write, never acknowledged) is dropped, but damage anywhere else in
  // the WAL fails the open (DataLoss) instead of silently dropping every
  // later write, as the default kPointInTimeRecovery does.
  db_opts.wal_recovery_mode = rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;
  db_opts.listeners.push_back(std::make_shared<ragkv::NoAutoRecovery>());
  db_opts.info_log = std::make_shared<ragkv::RocksLogger>("catalogue " + options.path);
  return db_opts;
}

std::vector<rocksdb::ColumnFamilyDescriptor> Families() {
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
  cfs.emplace_back(rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions());
  for (const char* name : kFamilies) cfs.emplace_back(name, rocksdb::ColumnFamilyOptions());
  return cfs;
}

}  // namespace

struct Catalogue::Impl {
  CatalogueOptions options;
  // mu: shared by every read and write, exclusive while the database is
  // reopened after a write error.
  mutable std::shared_mutex mu;
  std::unique_ptr<rocksdb::DB> db;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;  // default, docs, chunks, vectors, meta
  // failed_flag: a write failed; RocksDB is read-only until a reopen.
  std::atomic<bool> failed_flag{false};
  rocksdb::ColumnFamilyHandle* cf(Family f) const { return handles[1 + f]; }

  absl::Status OpenLocked() {
    if (options.create_if_missing) {
      // RocksDB creates a missing directory itself, but first logs its
      // absence at ERROR level: a first start would print an error. An
      // error here is left to Open to report.
      std::error_code ec;
      std::filesystem::create_directories(options.path, ec);
    }
    rocksdb::DB* raw = nullptr;
    rocksdb::Status s = rocksdb::DB::Open(DbOptions(options), options.path, Families(), &handles, &raw);
    if (!s.ok()) {
      if (s.IsInvalidArgument() && !options.create_if_missing) {
        return absl::NotFoundError(absl::StrCat("catalogue open ", options.path, ": ", s.ToString()));
      }
      return FromRocks(s, absl::StrCat("open ", options.path));
    }
    db.reset(raw);
    return absl::OkStatus();
  }
  void CloseLocked() {
    if (!db) return;
    for (auto* h : handles) db->DestroyColumnFamilyHandle(h).PermitUncheckedError();
    handles.clear();
    db->Close().PermitUncheckedError();
    db.reset();
  }
  // Ready: OK when the database is open (a reopen after a write error may
  // have failed; the next write tries again).
  absl::Status Ready() const {
    if (db) return absl::OkStatus();
    return absl::UnavailableError(absl::StrCat("catalogue ", options.path,
                                               ": closed after a failed reopen; retried on the next write"));
  }
  ~Impl() { CloseLocked(); }
};

Catalogue::Catalogue(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Catalogue::~Catalogue() = default;

absl::StatusOr<std::unique_ptr<Catalogue>> Catalogue::Open(CatalogueOptions options) {
  if (options.path.empty()) return absl::InvalidArgumentError("Catalogue: path is empty");
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  RETURN_IF_ERROR(impl->OpenLocked());
  return std::unique_ptr<Catalogue>(new Catalogue(std::move(impl)));
}

absl::Status Catalogue::Repair(const std::string& path) {
  std::vector<rocksdb::ColumnFamilyDescriptor> cfs = Families();
  rocksdb::Options opts = DbOptions(CatalogueOptions{path, false, true});
  return FromRocks(rocksdb::RepairDB(path, opts, cfs), absl::StrCat("repair ", path));
}

absl::Status Catalogue::ReopenIfFailed() {
  if (!impl_->failed_flag.load()) return absl::OkStatus();
  // Keep the read-only database serving reads while the disk is still full.
  if (DiskTooFullToReopen(impl_->options.path)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "catalogue ", impl_->options.path, ": the disk is full (writes resume by themselves "
        "once space is freed)"));
  }
  std::unique_lock<std::shared_mutex> lock(impl_->mu);
  if (!impl_->failed_flag.load()) return absl::OkStatus();
  impl_->CloseLocked();
  RETURN_IF_ERROR(impl_->OpenLocked());
  impl_->failed_flag.store(false);
  return absl::OkStatus();
}

absl::Status Catalogue::Apply(const CatalogueMutation& m) {
  RETURN_IF_ERROR(ReopenIfFailed());
  std::shared_lock<std::shared_mutex> lock(impl_->mu);
  RETURN_IF_ERROR(impl_->Ready());
  rocksdb::WriteBatch batch;
  auto check = [](const rocksdb::Status& s) { return FromRocks(s, "batch"); };
  for (const std::string& id : m.delete_documents) RETURN_IF_ERROR(check(batch.Delete(impl_->cf(kDocs), id)));
  for (int64_t id : m.delete_chunks) {
    const std::string key = internal::EncodeChunkId(id);
    RETURN_IF_ERROR(check(batch.Delete(impl_->cf(kChunks), key)));
    RETURN_IF_ERROR(check(batch.Delete(impl_->cf(kVectors), key)));
  }
  for (const DocumentRecord& d : m.put_documents) {
    RETURN_IF_ERROR(check(batch.Put(impl_->cf(kDocs), d.doc_id, EncodeDocument(d))));
  }
  for (const ChunkRecord& c : m.put_chunks) {
    RETURN_IF_ERROR(check(batch.Put(impl_->cf(kChunks), internal::EncodeChunkId(c.chunk_id), EncodeChunk(c))));
  }
  for (const auto& [id, v] : m.put_vectors) {
    RETURN_IF_ERROR(check(batch.Put(impl_->cf(kVectors), internal::EncodeChunkId(id), EncodeVector(v))));
  }
  for (const auto& [k, v] : m.put_meta) RETURN_IF_ERROR(check(batch.Put(impl_->cf(kMeta), k, v)));
  rocksdb::WriteOptions wo;
  wo.sync = impl_->options.sync_writes;
  rocksdb::Status s = impl_->db->Write(wo, &batch);
  if (s.ok() && (!m.put_documents.empty() || !m.delete_documents.empty())) {
    // Documents live in SST files, not only in the WAL: RocksDB's RepairDB
    // (ragkv repair) cannot replay WAL records of a non-default column
    // family once the MANIFEST is lost, and a damaged WAL then loses at
    // most the writes since the last document change.
    rocksdb::FlushOptions fo;
    fo.wait = true;
    s = impl_->db->Flush(fo, {impl_->handles.begin() + 1, impl_->handles.end()});
  }
  if (!s.ok() && !s.IsInvalidArgument()) impl_->failed_flag.store(true);
  return FromRocks(s, "write");
}

absl::StatusOr<int64_t> Catalogue::DeleteVectors(int64_t begin_id, int64_t end_id) {
  RETURN_IF_ERROR(ReopenIfFailed());
  std::shared_lock<std::shared_mutex> lock(impl_->mu);
  RETURN_IF_ERROR(impl_->Ready());
  const std::string begin = internal::EncodeChunkId(begin_id);
  // No bound: above every EncodeChunkId of an int64 >= 0 (deleted too).
  const std::string end = end_id < 0 ? std::string(8, '\xff') : internal::EncodeChunkId(end_id);
  int64_t found = 0;
  {
    std::unique_ptr<rocksdb::Iterator> it(impl_->db->NewIterator(rocksdb::ReadOptions(), impl_->cf(kVectors)));
    for (it->Seek(begin); it->Valid() && (end_id < 0 || it->key().compare(end) < 0); it->Next()) ++found;
    RETURN_IF_ERROR(FromRocks(it->status(), "scan vectors"));
  }
  if (found == 0) return found;
  rocksdb::WriteOptions wo;
  wo.sync = impl_->options.sync_writes;
  rocksdb::WriteBatch batch;
  RETURN_IF_ERROR(FromRocks(batch.DeleteRange(impl_->cf(kVectors), begin, end), "batch"));
  if (end_id < 0) RETURN_IF_ERROR(FromRocks(batch.Delete(impl_->cf(kVectors), end), "batch"));
  rocksdb::Status s = impl_->db->Write(wo, &batch);
  if (!s.ok() && !s.IsInvalidArgument()) impl_->failed_flag.store(true);
  RETURN_IF_ERROR(FromRocks(s, "delete vectors"));
  return found;
}

namespace {
absl::StatusOr<std::optional<std::string>> GetRaw(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* cf,
                                                  const std::string& key) {
  std::string value;
  rocksdb::Status s = db->Get(rocksdb::ReadOptions(), cf, key, &value);
  if (s.IsNotFound()) return std::optional<std::string>();
  RETURN_IF_ERROR(FromRocks(s, "get"));
  return std::optional<std::string>(std::move(value));
}
}  // namespace

absl::StatusOr<std::optional<DocumentRecord>> Catalogue::GetDocument(const std::string& doc_id) const {
  std::shared_lock<std::shared_mutex> lock(impl_->mu);
  RETURN_IF_ERROR(impl_->Ready());
  ASSIGN_OR_RETURN(auto raw, GetRaw(impl_->db.get(), impl_->cf(kDocs), doc_id));
  if (!raw) return std::optional<DocumentRecord>();
  ASSIGN_OR_RETURN(DocumentRecord r, DecodeDocument(*raw));
  return std::optional<DocumentRecord>(std::move(r));
}

absl::StatusOr<std::optional<ChunkRecord>> Catalogue::GetChunk(int64_t chunk_id) const {
  std::shared_lock<std::shared_mutex> lock(impl_->mu);
  RETURN_IF_ERROR(impl_->Ready());
  ASSIGN_OR_RETURN(auto raw, GetRaw(impl_->db.get(), impl_->cf(kChunks), internal::EncodeChunkId(chunk_id)));
  if (!raw) return std::optional<ChunkRecord>();
  ASSIGN_OR_RETURN(ChunkRecord r, DecodeChunk(*raw));
  return std::optional<ChunkRecord>(std::move(r));
}

absl::StatusOr<std::optional<std::vector<float>>> Catalogue::GetVector(int64_t chunk_id) const {
  std::shared_lock<std::shared_mutex> lock(impl_->mu);
  RETURN_IF_ERROR(impl_->Ready());
  ASSIGN_OR_RETURN(auto raw, GetRaw(impl_->db.get(), impl_->cf(kVectors), internal::EncodeChunkId(chunk_id)));
  if (!raw) return std::optional<std::vector<float>>();
  std::vector<float> buf;
  absl::Span<const float> span;
  if (!VectorPayload(*raw, &span, &buf)) return absl::DataLossError("catalogue: undecodable vector record");
  return std::optional<std::vector<float>>(std::move(buf));
}

absl::StatusOr<std::optional<std::string>> Catalogue::GetMeta(const std::string& key) const {
  std::shared_lock<std::shared_mutex> lock(impl_->mu);
  RETURN_IF_ERROR(impl_->Ready());
  return GetRaw(impl_->db.get(), impl_->cf(kMeta), key);
}

namespace {
template <typename F>
absl::Status Scan(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* cf, F&& fn) {
  std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions(), cf));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    RETURN_IF_ERROR(fn(it->key(), it->value()));
  }
  return FromRocks(it->status(), "scan");
}
}  // namespace

absl::Status Catalogue::ForEachDocument(const std::function<absl::Status(const DocumentRecord&)>& fn) const {
  std::shared_lock<std::shared_mutex> lock(impl_->mu);
  RETURN_IF_ERROR(impl_->Ready());
  return Scan(impl_->db.get(), impl_->cf(kDocs), [&](const rocksdb::Slice&, const rocksdb::Slice& v) {
    ASSIGN_OR_RETURN(DocumentRecord r, DecodeDocument(std::string_view(v.data(), v.size())));
    return fn(r);
  });
}

absl::Status Catalogue::ForEachChunk(const std::function<absl::Status(const ChunkRecord&)>& fn) const {
  std::shared_lock<std::shared_mutex> lock(impl_->mu);
  RETURN_IF_ERROR(impl_->Ready());
  return Scan(impl_->db.get(), impl_->cf(kChunks), [&](const rocksdb::Slice&, const rocksdb::Slice& v) {
    ASSIGN_OR_RETURN(ChunkRecord r, DecodeChunk(std::string_view(v.data(), v.size())));
    return fn(r);
  });
}

absl::Status Catalogue::ForEachVector(
    const std::function<absl::Status(int64_t, absl::Span<const float>)>& fn) const {
  std::shared_lock<std::shared_mutex> lock(impl_->mu);
  RETURN_IF_ERROR(impl_->Ready());
  std::vector<float> buf;
  return Scan(impl_->db.get(), impl_->cf(kVectors), [&](const rocksdb::Slice& k, const rocksdb::Slice& v) {
    absl::Span<const float> span;
    if (!VectorPayload(std::string_view(v.data(), v.size()), &span, &buf)) {
      return absl::DataLossError("catalogue: undecodable vector record");
    }
    return fn(internal::DecodeChunkId(std::string_view(k.data(), k.size())), span);
  });
}

}  // namespace ragkv::retrieval
