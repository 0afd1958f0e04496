// What a config can make the real engine do: names, tags and notes are data (never a path out
// of the run directory, never SQL), paths are opened and never executed, and every file and
// folder the run writes has the user's umask.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <regex>

#include "Support.h"
#include "trainscope/core/store/RunStore.h"

using namespace ts;
using namespace ts::validation;
using nlohmann::json;

namespace {

json tinyConfig(const std::string& name) {
  return {{"name", name},
          {"model", {{"layers", 1}, {"heads", 2}, {"d_model", 16}, {"seq_len", 16}}},
          {"data", {{"source", "synthetic"}, {"task", "addition"}, {"digits", 2}}},
          {"train", {{"steps", 3}, {"micro_batch", 2}, {"eval_every", 0}, {"checkpoint_every", 2}}},
          {"device", {{"threads", 1}}}};
}

fs::path writeJson(const fs::path& p, const json& j) {
  std::ofstream(p) << j.dump(1);
  return p;
}

// Files a shell would have created had the engine run a command named in the config.
const char* kMarkers[] = {"PWNED_A", "PWNED_B", "PWNED_C", "PWNED_D", "PWNED_E", "PWNED_F"};

void expectNoMarkers(const fs::path& dir) {
  for (const char* m : kMarkers) {
    EXPECT_FALSE(fs::exists(dir / m)) << "something executed a command from the config: " << m;
    EXPECT_FALSE(fs::exists(fs::current_path() / m)) << m;
  }
}

}  // namespace

TEST(E2eSecurity, HostileNamesTagsAndNotesAreStoredVerbatimAndStayInsideTheRunsFolder) {
  const fs::path dir = tempDir("hostile");
  const std::string name = "../../../escape/'; DROP TABLE runs; --$(touch " +
                           (dir / "PWNED_A").string() + ")`touch PWNED_B`" + std::string(300, 'A');
  const std::vector<std::string> tags = {"'); DELETE FROM metrics; --", "../../etc", "\"q\" \\ %s"};
  const std::string notes = "Robert'); DROP TABLE runs;--\nline 2 \xe2\x9c\x93 %n%n";
  json cfg = tinyConfig(name);
  cfg["tags"] = tags;
  cfg["notes"] = notes;
  const fs::path config = writeJson(dir / "hostile.json", cfg);
  const fs::path db = dir / "store" / "runs.db";
  Child c = spawn({TRAINSCOPE_ENGINE_BIN, "run", config.string(), "--db", db.string()},
                  {"XDG_DATA_HOME=" + (dir / "data").string()});
  ASSERT_EQ(c.wait(), 0);
  expectNoMarkers(dir);
  EXPECT_FALSE(fs::exists(dir.parent_path() / "escape"));
  EXPECT_FALSE(fs::exists(dir / "escape"));

  // Exactly one run folder, directly under runs/ next to the database, with a tame name.
  std::vector<fs::path> runs;
  for (const auto& e : fs::directory_iterator(dir / "store" / "runs")) runs.push_back(e.path());
  ASSERT_EQ(runs.size(), 1u);
  const std::string folder = runs[0].filename().string();
  EXPECT_TRUE(std::regex_match(folder, std::regex("[A-Za-z0-9_-]{1,64}-[0-9]{8}-[0-9]{6}-[0-9]+")))
      << folder;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const auto rel = fs::relative(fs::weakly_canonical(e.path()), fs::weakly_canonical(dir));
    EXPECT_FALSE(rel.empty() || *rel.begin() == "..") << e.path();
  }

  // The database holds the strings exactly (bound parameters) and is whole.
  auto store = core::RunStore::open(db.string(), core::RunStore::Mode::ReadOnly);
  const auto all = store.listRuns();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].name, name);
  EXPECT_EQ(all[0].tags, tags);
  EXPECT_EQ(all[0].notes, notes);
  EXPECT_EQ(store.steps(all[0].id).size(), 3u);
  EXPECT_EQ(fs::weakly_canonical(all[0].runDir), fs::weakly_canonical(runs[0]));
  fs::remove_all(dir);
}

TEST(E2eSecurity, PathsInAConfigAreOpenedNeverExecuted) {
  const fs::path dir = tempDir("paths");
  const std::string d = dir.string() + "/";
  struct Case {
    std::string key;
    json value;
    std::string field;  // the field the error must name
  };
  const std::vector<Case> cases = {
      {"data", {{"source", "text"}, {"path", "$(touch " + d + "PWNED_C)"}}, "data.path"},
      {"data", {{"source", "tokens"}, {"path", "`touch " + d + "PWNED_D`"}}, "data.path"},
      {"data",
       {{"source", "text"},
        {"path", (dir / "corpus.txt").string()},
        {"tokenizer", "|touch PWNED_E"}},
       "data.tokenizer"},
      {"parallel", {{"ranks", 2}, {"hostfile", "; touch " + d + "PWNED_F"}}, "parallel.hostfile"},
  };
  std::ofstream(dir / "corpus.txt") << std::string(4000, 'a');
  for (const auto& k : cases) {
    SCOPED_TRACE(k.field + " = " + k.value.dump());
    json cfg = tinyConfig("paths");
    for (auto& [f, v] : k.value.items()) cfg[k.key][f] = v;
    if (k.value.value("source", "") == "tokens") cfg["model"]["vocab"] = 256;  // else that error
    const fs::path config = writeJson(dir / "paths.json", cfg);
    Child c = spawn({TRAINSCOPE_ENGINE_BIN, "run", config.string(), "--db",
                     (dir / "runs.db").string(), "--run-dir", (dir / "run").string()},
                    {"XDG_DATA_HOME=" + (dir / "data").string()});
    const int code = c.wait();
    EXPECT_NE(code, 0);
    std::string errors;
    for (const auto& e : c.events())
      if (e.value("type", "") == "error" || e.value("type", "") == "finished")
        errors += e.dump() + "\n";
    EXPECT_NE(errors.find(k.field), std::string::npos) << errors;
    expectNoMarkers(dir);
  }
  fs::remove_all(dir);
}

TEST(E2eSecurity, EveryFileTheRunWritesHasTheUsersUmask) {
  for (mode_t mask : {mode_t(077), mode_t(002)}) {
    SCOPED_TRACE(mask);
    const fs::path dir = tempDir("umask");
    const fs::path config = writeJson(dir / "umask.json", tinyConfig("umask"));
    const fs::path out = dir / "out";
    const mode_t old = ::umask(mask);
    Child c =
        spawn({TRAINSCOPE_ENGINE_BIN, "run", config.string(), "--db", (out / "runs.db").string()},
              {"XDG_DATA_HOME=" + (out / "data").string()});
    ::umask(old);
    ASSERT_EQ(c.wait(), 0);
    int files = 0;
    for (const auto& e : fs::recursive_directory_iterator(out)) {
      struct stat st {};
      ASSERT_EQ(::lstat(e.path().c_str(), &st), 0);
      const mode_t want = (S_ISDIR(st.st_mode) ? 0777 : 0666) & ~mask;
      EXPECT_EQ(st.st_mode & 0777, want) << e.path();
      files += S_ISREG(st.st_mode);
    }
    // The database, events, acknowledgements, recorder metadata and two checkpoints.
    EXPECT_GE(files, 9);
    fs::remove_all(dir);
  }
}
