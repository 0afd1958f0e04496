// OffloadStore: the NVMe tier's files, asynchronous reads and writes, and the errors that must
// stop a run before training starts.
#include "trainscope/engine/optim/OffloadStore.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace ts::engine {
namespace {

namespace fs = std::filesystem;

// A fresh directory under /tmp per test, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string pattern = "/tmp/ts-offload-test-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<char> randomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<char> v(n);
  for (char& c : v) c = static_cast<char>(rng());
  return v;
}

template <typename F>
std::string errorOf(F&& f) {
  try {
    f();
  } catch (const OffloadError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no OffloadError thrown";
  return {};
}

constexpr int64_t kMiB = int64_t{1} << 20;

TEST(OffloadStore, RoundTripWithManyOverlappingRequests) {
  TempDir tmp;
  // Sizes that are not multiples of anything, and large enough that requests are split.
  const std::vector<std::pair<std::string, int64_t>> specs = {
      {"exp_avg", 9 * kMiB + 123}, {"exp_avg_sq", kMiB - 5}, {"master", 17 * kMiB + 7}};
  OffloadStore store({tmp.path() + "/rank0", 4}, specs);
  ASSERT_EQ(store.numBuffers(), 3);

  std::vector<std::vector<char>> data;
  for (size_t i = 0; i < specs.size(); ++i)
    data.push_back(randomBytes(static_cast<size_t>(specs[i].second), 1000 + i));

  // Random cuts of [begin, end) into pieces from 1 byte to ~6 MiB, in shuffled order.
  std::mt19937 rng(42);
  struct Piece {
    int buffer;
    int64_t offset, bytes;
  };
  auto cut = [&](int buffer, int64_t begin, int64_t end) {
    std::vector<Piece> pieces;
    while (begin < end) {
      const int64_t n = std::min<int64_t>(end - begin, 1 + rng() % (6 * kMiB));
      pieces.push_back({buffer, begin, n});
      begin += n;
    }
    return pieces;
  };
  std::vector<Piece> firstHalves, secondHalves;
  for (int b = 0; b < 3; ++b) {
    const int64_t half = specs[b].second / 2;
    auto a = cut(b, 0, half), z = cut(b, half, specs[b].second);
    firstHalves.insert(firstHalves.end(), a.begin(), a.end());
    secondHalves.insert(secondHalves.end(), z.begin(), z.end());
  }
  std::shuffle(firstHalves.begin(), firstHalves.end(), rng);
  std::shuffle(secondHalves.begin(), secondHalves.end(), rng);

  for (const Piece& p : firstHalves)
    store.write(p.buffer, p.offset, &data[p.buffer][p.offset], p.bytes);
  store.waitAll();

  // Writes of the second halves and reads of the first halves, interleaved and all in flight.
  std::vector<std::vector<char>> back;
  for (const auto& d : data) back.emplace_back(d.size(), 0);
  std::vector<OffloadStore::Ticket> tickets;
  for (size_t i = 0; i < std::max(firstHalves.size(), secondHalves.size()); ++i) {
    if (i < secondHalves.size()) {
      const Piece& w = secondHalves[i];
      tickets.push_back(store.write(w.buffer, w.offset, &data[w.buffer][w.offset], w.bytes));
    }
    if (i < firstHalves.size()) {
      const Piece& r = firstHalves[i];
      tickets.push_back(store.read(r.buffer, r.offset, &back[r.buffer][r.offset], r.bytes));
    }
  }
  // Waited one by one in a random order; each is reported done exactly once.
  std::shuffle(tickets.begin(), tickets.end(), rng);
  for (OffloadStore::Ticket t : tickets) store.wait(t);
  store.waitAll();

  for (const Piece& p : secondHalves)
    store.read(p.buffer, p.offset, &back[p.buffer][p.offset], p.bytes);
  store.waitAll();
  for (int b = 0; b < 3; ++b) EXPECT_TRUE(back[b] == data[b]) << "buffer " << b << " differs";
}

TEST(OffloadStore, ReadReturnsTheBytesWrittenEarlier) {
  TempDir tmp;
  OffloadStore store({tmp.path(), 2}, {{"params", 64 * 1024}});
  const std::vector<char> src = randomBytes(10000, 7);
  store.write(0, 4097, src.data(), static_cast<int64_t>(src.size()));
  store.waitAll();

  std::vector<char> all(10000), part(100);
  const auto t1 = store.read(0, 4097, all.data(), 10000);
  const auto t2 = store.read(0, 4097 + 5000, part.data(), 100);
  store.waitAll();
  store.wait(t1);  // already finished: returns at once
  store.wait(t2);
  EXPECT_TRUE(all == src);
  EXPECT_TRUE(std::equal(part.begin(), part.end(), src.begin() + 5000));
}

TEST(OffloadStore, CreatesTheDirectoryWhenTheParentExists) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/nvme";
  {
    OffloadStore store({dir, 1}, {{"a", 4096}, {"b", 0}});
    EXPECT_TRUE(fs::is_directory(dir));
    EXPECT_EQ(store.path(0), dir + "/a.bin");
    EXPECT_EQ(store.path(1), dir + "/b.bin");
    EXPECT_EQ(store.size(0), 4096);
    EXPECT_EQ(store.size(1), 0);
  }
  EXPECT_FALSE(fs::exists(dir)) << "a directory the store created goes with it";
}

TEST(OffloadStore, MissingParentIsAClearError) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/no-such-parent/offload";
  const std::string msg = errorOf([&] { OffloadStore({dir, 1}, {{"a", 4096}}); });
  EXPECT_NE(msg.find(dir), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(tmp.path() + "/no-such-parent"));
}

TEST(OffloadStore, RegularFileIsNotADirectory) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/a-file";
  std::ofstream(dir) << "not a directory";
  const std::string msg = errorOf([&] { OffloadStore({dir, 1}, {{"a", 4096}}); });
  EXPECT_NE(msg.find(dir), std::string::npos) << msg;
  EXPECT_NE(msg.find("is not a directory"), std::string::npos) << msg;
}

TEST(OffloadStore, ReadOnlyDirectoryIsAClearError) {
  if (::geteuid() == 0) GTEST_SKIP() << "root writes to any directory";
  TempDir tmp;
  const std::string dir = tmp.path() + "/read-only";
  ASSERT_EQ(::mkdir(dir.c_str(), 0500), 0);
  const std::string msg = errorOf([&] { OffloadStore({dir, 1}, {{"a", 4096}}); });
  EXPECT_NE(msg.find(dir), std::string::npos) << msg;
  EXPECT_NE(msg.find("is not writable"), std::string::npos) << msg;
}

TEST(OffloadStore, NotEnoughSpaceFailsBeforeAnyFileIsMade) {
  TempDir tmp;
  const int64_t pebibyte = int64_t{1} << 50;
  const std::string msg = errorOf([&] {
    OffloadStore({tmp.path(), 1}, {{"small", 4096}, {"huge", pebibyte}});
  });
  EXPECT_NE(msg.find(tmp.path()), std::string::npos) << msg;
  EXPECT_NE(msg.find("needs " + std::to_string(pebibyte + 4096) + " bytes"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find(" free"), std::string::npos) << msg;
  EXPECT_TRUE(fs::is_empty(tmp.path()));
}

TEST(OffloadStore, EmptyPathAndBadNamesAreErrors) {
  TempDir tmp;
  EXPECT_NE(errorOf([&] {
              OffloadStore({"", 1}, {{"a", 1}});
            }).find("nvme_path"),
            std::string::npos);
  EXPECT_NE(errorOf([&] {
              OffloadStore({tmp.path(), 1}, {{"../a", 1}});
            }).find("invalid"),
            std::string::npos);
  EXPECT_NE(errorOf([&] {
              OffloadStore({tmp.path(), 1}, {{"a", 1}, {"a", 2}});
            }).find("twice"),
            std::string::npos);
}

// Documented choice: a region outside the buffer throws std::out_of_range at submission.
TEST(OffloadStore, RequestsOutsideABufferThrowAtSubmission) {
  TempDir tmp;
  OffloadStore store({tmp.path(), 2}, {{"a", 1000}});
  std::vector<char> buf(2000);
  EXPECT_THROW(store.read(0, 990, buf.data(), 20), std::out_of_range);
  EXPECT_THROW(store.read(0, 1001, buf.data(), 0), std::out_of_range);
  EXPECT_THROW(store.read(0, -1, buf.data(), 10), std::out_of_range);
  EXPECT_THROW(store.write(0, 0, buf.data(), 1001), std::out_of_range);
  EXPECT_THROW(store.write(1, 0, buf.data(), 1), std::out_of_range);
  EXPECT_THROW(store.read(-1, 0, buf.data(), 1), std::out_of_range);
  // The exact end is fine, and a zero-byte request is done at once.
  store.wait(store.write(0, 0, buf.data(), 1000));
  store.wait(store.read(0, 1000, buf.data(), 0));
  store.waitAll();
}

TEST(OffloadStore, DestructorRemovesItsFiles) {
  TempDir tmp;
  std::vector<std::string> paths;
  {
    OffloadStore store({tmp.path(), 2}, {{"x", 3 * kMiB}, {"y", 12345}});
    for (int b = 0; b < 2; ++b) {
      paths.push_back(store.path(b));
      ASSERT_TRUE(fs::is_regular_file(paths.back()));
      // Full size up front (posix_fallocate), not grown as it is written.
      EXPECT_EQ(static_cast<int64_t>(fs::file_size(paths.back())), store.size(b));
    }
    // Left in flight: the destructor waits for it before closing.
    static const std::vector<char> src = randomBytes(3 * kMiB, 3);
    store.write(0, 0, src.data(), 3 * kMiB);
  }
  for (const std::string& p : paths) EXPECT_FALSE(fs::exists(p)) << p;
  EXPECT_TRUE(fs::is_empty(tmp.path()));
}

TEST(OffloadStore, StaleFileOfAnEarlierRunIsReplaced) {
  TempDir tmp;
  const std::string stale = tmp.path() + "/optim.bin";
  std::ofstream(stale, std::ios::binary) << std::string(kMiB, '\xAB');
  ASSERT_EQ(fs::file_size(stale), static_cast<uintmax_t>(kMiB));

  OffloadStore store({tmp.path(), 1}, {{"optim", 4096}});
  EXPECT_EQ(store.path(0), stale);
  EXPECT_EQ(fs::file_size(stale), 4096u);
  // A new file, not the old bytes.
  std::vector<char> back(4096, 1);
  store.wait(store.read(0, 0, back.data(), 4096));
  EXPECT_TRUE(std::all_of(back.begin(), back.end(), [](char c) { return c == 0; }));
}

TEST(OffloadStore, StatsCountBytesExactly) {
  TempDir tmp;
  OffloadStore store({tmp.path(), 3}, {{"a", 10 * kMiB}, {"b", 777}});
  const std::vector<char> src = randomBytes(10 * kMiB, 5);
  store.write(0, 0, src.data(), 10 * kMiB);  // split into chunks
  store.write(1, 10, src.data(), 700);
  store.waitAll();
  std::vector<char> dst(10 * kMiB);
  store.read(0, 123, dst.data(), 5 * kMiB);
  store.read(1, 0, dst.data() + 5 * kMiB, 777);
  store.read(1, 0, dst.data(), 0);
  store.waitAll();

  const OffloadStore::Stats s = store.takeStats();
  EXPECT_EQ(s.bytesWritten, 10 * kMiB + 700);
  EXPECT_EQ(s.bytesRead, 5 * kMiB + 777);
  EXPECT_GE(s.ioSeconds, 0.0);
  EXPECT_GE(s.waitSeconds, 0.0);
  EXPECT_TRUE(std::isfinite(s.ioSeconds) && std::isfinite(s.waitSeconds));

  const OffloadStore::Stats again = store.takeStats();
  EXPECT_EQ(again.bytesRead, 0);
  EXPECT_EQ(again.bytesWritten, 0);
  EXPECT_EQ(again.ioSeconds, 0.0);
  EXPECT_EQ(again.waitSeconds, 0.0);
}

// A failed request is reported by wait() for its ticket (once), or by waitAll(), and the store
// stays usable. The failure is real: the file is cut short behind the store's back.
TEST(OffloadStore, FailedRequestIsReportedNotLost) {
  TempDir tmp;
  OffloadStore store({tmp.path(), 2}, {{"a", 9 * kMiB}});
  ASSERT_EQ(::truncate(store.path(0).c_str(), 1000), 0);
  // Separate destinations: requests in flight together must not share bytes.
  std::vector<char> dst(9 * kMiB), small(1000), other(10);

  const auto bad = store.read(0, 0, dst.data(), 9 * kMiB);
  const auto good = store.read(0, 0, small.data(), 1000);
  const std::string msg = errorOf([&] { store.wait(bad); });
  EXPECT_NE(msg.find(store.path(0)), std::string::npos) << msg;
  EXPECT_NE(msg.find("end of file"), std::string::npos) << msg;
  EXPECT_NO_THROW(store.wait(good));
  EXPECT_NO_THROW(store.waitAll()) << "already reported by wait()";

  store.read(0, 2000, dst.data(), 10);
  store.read(0, 3000, other.data(), 10);
  const std::string all = errorOf([&] { store.waitAll(); });
  EXPECT_NE(all.find("offset 2000"), std::string::npos) << all;
  EXPECT_NE(all.find("1 more failed"), std::string::npos) << all;
  EXPECT_NO_THROW(store.waitAll());

  // Writing the region again makes it readable.
  const std::vector<char> src = randomBytes(4096, 9);
  store.write(0, 0, src.data(), 4096);
  store.waitAll();
  std::vector<char> back(4096);
  store.wait(store.read(0, 0, back.data(), 4096));
  EXPECT_TRUE(back == src);
}

TEST(OffloadStore, MeasureDiskRateIsPositiveAndLeavesNothing) {
  TempDir tmp;
  const auto [writeRate, readRate] = measureDiskRate(tmp.path(), 8 * kMiB + 100);
  EXPECT_TRUE(std::isfinite(writeRate) && writeRate > 0) << writeRate;
  EXPECT_TRUE(std::isfinite(readRate) && readRate > 0) << readRate;
  EXPECT_TRUE(fs::is_empty(tmp.path()));
  EXPECT_THROW(measureDiskRate(tmp.path() + "/missing", kMiB), OffloadError);
}

}  // namespace
}  // namespace ts::engine
