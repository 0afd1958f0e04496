#pragma once
// Internal to RunStore*.cpp: the connection a RunStore holds and its lock, shared by the files
// that implement it (RunStore: open; Queries: runs; Series: one run's tables; Edits; Import).
#include <mutex>
#include <string>

#include "RunStoreDb.h"
#include "trainscope/core/store/RunStore.h"

namespace ts::core {

struct RunStore::Impl {
  Impl(const std::string& path, bool ro, const Options& o)
      : db(path, ro, o.create, o.busyTimeoutMs, o.staleAfterSeconds) {}
  store::Db db;
  std::mutex mutex;  // one connection: calls are serialized
};

namespace store {

// Edits refuse a store opened read-only, saying so.
inline void requireWritable(Db& db) {
  if (db.readOnly())
    throw StoreError(StoreError::Kind::ReadOnly,
                     "database " + db.path() + " was opened read-only; cannot modify runs");
}

}  // namespace store
}  // namespace ts::core
