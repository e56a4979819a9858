// process_tuning.h: process-wide settings that the KV store's large values
// benefit from. Call once from main (never from a library), before threads
// start. Not thread-safe.
#ifndef RAGKV_KVSTORE_PROCESS_TUNING_H_
#define RAGKV_KVSTORE_PROCESS_TUNING_H_

namespace ragkv::kvstore {

// TuneMallocForLargeValues: glibc malloc serves allocations up to 32 MiB from
// the heap (M_MMAP_THRESHOLD) and keeps up to 1 GiB of freed heap
// (M_TRIM_THRESHOLD) instead of returning it to the kernel. RocksDB
// allocates a fresh buffer per blob read (one per KV layer, ~2 MiB for an
// 8B-class model); with the defaults each one is a new mmap or a trimmed
// heap, i.e. page faults and page clearing on every read. Measured effect in
// docs/benchmarks.md (kvstore section). Returns false if glibc refused.
bool TuneMallocForLargeValues();

}  // namespace ragkv::kvstore

#endif  // RAGKV_KVSTORE_PROCESS_TUNING_H_
