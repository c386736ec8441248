// Run configs: schema checks with file:line messages, defaults, --set overrides.
#include <gtest/gtest.h>

#include "core/common/check.h"
#include "core/common/config.h"

using namespace booster;

namespace {

ConfigSchema schema() {
  ConfigSchema s;
  s.add("train.batch_size", ConfigType::integer, 32, "per-rank batch")
      .add("train.lr", ConfigType::floating, 3e-4)
      .add("train.augment", ConfigType::boolean, true)
      .add("model.name", ConfigType::string, "vit-tiny")
      .add("train.milestones", ConfigType::integer_list, toml::array{})
      .add_required("data.root", ConfigType::string, "folder of the dataset")
      .add("data.limit", ConfigType::integer, 0)
      .add("train.warmup_ratio", ConfigType::floating, 0.1)
      .open_table("plugin");
  s.range("data.limit", 0).range("train.lr", 0).range("train.warmup_ratio", 0, 1);
  return s;
}

std::string error_of(Config c) {
  try {
    c.apply(schema());
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Config, DefaultsAndTypedAccess) {
  Config c = Config::from_string("[data]\nroot = \"/beans\"\n[train]\nlr = 1\n[plugin]\nname = \"torch_ddp\"\nbucket_cap_mb = 25\n",
                                 "run.toml");
  c.apply(schema());
  EXPECT_EQ(c.get_int("train.batch_size"), 32);
  EXPECT_EQ(c.get_float("train.lr"), 1.0);  // an integer is accepted for a number
  EXPECT_TRUE(c.get_bool("train.augment"));
  EXPECT_EQ(c.get_string("plugin.name"), "torch_ddp");
  EXPECT_EQ(c.keys("plugin"), (std::vector<std::string>{"bucket_cap_mb", "name"}));
  EXPECT_EQ(c.where("train.lr"), "run.toml:4");
  EXPECT_TRUE(c.is_string("plugin.name"));
  EXPECT_FALSE(c.is_string("plugin.bucket_cap_mb"));
  EXPECT_FALSE(c.is_string("plugin"));
  EXPECT_FALSE(c.is_string("plugin.nothing"));
}

TEST(Config, UnknownKeyNamesFileLineAndAcceptedKeys) {
  const std::string msg =
      error_of(Config::from_string("[data]\nroot = \"x\"\n[train]\nbatchsize = 8\n", "run.toml"));
  EXPECT_NE(msg.find("run.toml:4: unknown key 'train.batchsize' in [train]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("accepted: augment, batch_size, lr, milestones"), std::string::npos) << msg;
}

TEST(Config, WrongTypeAndMissingRequired) {
  const std::string msg = error_of(Config::from_string("[train]\nbatch_size = \"big\"\nlr = true\n", "run.toml"));
  EXPECT_NE(msg.find("run.toml:2: key 'train.batch_size' must be an integer, got a string"), std::string::npos) << msg;
  EXPECT_NE(msg.find("run.toml:3: key 'train.lr' must be a number, got a boolean"), std::string::npos) << msg;
  EXPECT_NE(msg.find("required key 'data.root' is missing"), std::string::npos) << msg;
  EXPECT_NE(error_of(Config::from_string("[data]\nroot = 'x'\n[oops]\na = 1\n", "r.toml")).find("unknown key 'oops'"),
            std::string::npos);
}

TEST(Config, NumbersOutOfRangeNameKeyValueAndWhere) {
  const std::string msg = error_of(
      Config::from_string("[data]\nroot = 'x'\nlimit = -5\n[train]\nwarmup_ratio = 1.5\n", "run.toml", {"train.lr=-0.001"}));
  EXPECT_NE(msg.find("run.toml:3: key 'data.limit' must be >= 0, got -5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("run.toml:5: key 'train.warmup_ratio' must be in [0, 1], got 1.5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--set train.lr: key 'train.lr' must be >= 0, got -0.001"), std::string::npos) << msg;
  EXPECT_EQ(error_of(Config::from_string("[data]\nroot = 'x'\nlimit = 0\n[train]\nwarmup_ratio = 1\n", "r")), "");
  ConfigSchema s;
  EXPECT_THROW(s.range("not.added", 0), ValueError);
}

// A flag (Galvatron's switches): true, false, 1 or 0; any other integer or type named.
TEST(Config, FlagsTakeBooleansAndZeroOrOne) {
  ConfigSchema s;
  s.add("plugin.sdp", ConfigType::flag, false).add("plugin.ckpt", ConfigType::flag, false).add("plugin.tp", ConfigType::flag, true);
  Config c = Config::from_string("[plugin]\nsdp = 1\nckpt = true\ntp = 0\n", "g.toml");
  c.apply(s);
  EXPECT_TRUE(c.get_flag("plugin.sdp"));
  EXPECT_TRUE(c.get_flag("plugin.ckpt"));
  EXPECT_FALSE(c.get_flag("plugin.tp"));
  for (const char* bad : {"sdp = 2\n", "sdp = 'yes'\n"}) {
    std::string msg;
    try {
      Config::from_string(std::string("[plugin]\n") + bad, "g.toml").apply(s);
    } catch (const ValueError& e) {
      msg = e.what();
    }
    EXPECT_NE(msg.find("g.toml:2: key 'plugin.sdp' must be a boolean (or 0 / 1)"), std::string::npos) << msg;
  }
}

TEST(Config, SetOverrides) {
  Config c = Config::from_string("[data]\nroot = \"x\"\n", "run.toml",
                                 {"train.batch_size=8", "model.name=vit-small", "train.milestones=[3, 6]", "plugin.tp_size=2"});
  c.apply(schema());
  EXPECT_EQ(c.get_int("train.batch_size"), 8);
  EXPECT_EQ(c.get_string("model.name"), "vit-small");  // a bare word is a string
  EXPECT_EQ(c.get_int_list("train.milestones"), (std::vector<int64_t>{3, 6}));
  EXPECT_EQ(c.where("train.batch_size"), "--set train.batch_size");
  const std::string msg = error_of(Config::from_string("[data]\nroot = 'x'\n", "run.toml", {"train.batch_size=1.5"}));
  EXPECT_NE(msg.find("--set train.batch_size: key 'train.batch_size' must be an integer, got a float"), std::string::npos)
      << msg;
  EXPECT_THROW(Config::from_string("", "r", {"nonsense"}), ValueError);
}

TEST(Config, SyntaxErrorNamesFile) {
  try {
    Config::from_string("[train\nx = 1\n", "broken.toml");
    FAIL();
  } catch (const IOError& e) {
    EXPECT_NE(std::string(e.what()).find("broken.toml"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Config::from_file("/nonexistent/run.toml"), IOError);
}
