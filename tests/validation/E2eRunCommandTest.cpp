// The real `trainscope-engine run`: options before the positional config, and the memory_plan
// it emits (vocab taken from the data, as the trainer does) against the measured memory events.
#include <gtest/gtest.h>

#include "Support.h"
#include "trainscope/core/plan/MemoryTable.h"

using namespace ts;
using namespace ts::validation;
using nlohmann::json;

// `run --set a=1 --set b=2 CONFIG`: each --set takes one value, CONFIG stays the positional, and
// both overrides apply. Then the memory_plan on stdout predicts the measured model states
// exactly — which needs the data's vocabulary (the grammar corpus is far from GPT-2's 50257).
TEST(E2eRunCommand, SetBeforeConfigAndMemoryPlanMatchesMeasuredModelStates) {
  for (const char* task : {"addition", "grammar"}) {
    SCOPED_TRACE(task);
    const fs::path dir = tempDir(std::string("setfirst_") + task);
    Child c = spawn({TRAINSCOPE_ENGINE_BIN, "run", "--set", "train.steps=2", "--set",
                     std::string("data.task=") + task, "--set", "device.threads=1",
                     std::string(TRAINSCOPE_PRESET_DIR) + "/default.json", "--db",
                     (dir / "runs.db").string(), "--run-dir", (dir / "run").string()});
    ASSERT_GT(c.pid, 0);
    const int code = c.wait();
    fs::remove_all(dir);
    ASSERT_EQ(code, 0);
    json config, plan, memory;
    int steps = 0;
    for (const auto& e : c.events()) {
      if (e["type"] == "config") config = e["config"];
      if (e["type"] == "memory_plan") plan = e;
      if (e["type"] == "memory") memory = e;
      if (e["type"] == "step") ++steps;
    }
    ASSERT_TRUE(config.is_object());
    EXPECT_EQ(config["train"]["steps"], 2);
    EXPECT_EQ(config["data"]["task"], task);
    EXPECT_EQ(steps, 2);
    ASSERT_TRUE(plan.is_object()) << "no memory_plan event";
    ASSERT_TRUE(memory.is_object()) << "no memory event";
    const auto predicted = core::memoryReportFromJson(plan);
    const auto measured = core::memoryReportFromJson(memory);
    ASSERT_EQ(predicted.ranks.size(), 1u);
    ASSERT_EQ(measured.ranks.size(), 1u);
    for (auto cat : {core::MemoryCategory::Parameters, core::MemoryCategory::Gradients,
                     core::MemoryCategory::OptimizerState}) {
      const auto& p = predicted.ranks[0].at(core::MemoryTier::Device, cat);
      const auto& m = measured.ranks[0].at(core::MemoryTier::Device, cat);
      EXPECT_EQ(p.peak, m.peak) << core::toString(cat);
      EXPECT_EQ(p.current, m.current) << core::toString(cat);
      EXPECT_GT(m.peak, 0) << core::toString(cat);
    }
  }
}
