// `--data_url`'s patterns expanded as WebDataset's braceexpand does, and malformed ones refused
// with one line naming the flag.
#include "data/shard_urls.h"

#include <gtest/gtest.h>

#include "support/support.h"

namespace ddpx::data {
namespace {

using V = std::vector<std::string>;

TEST(ShardUrlsTest, RangesKeepTheirZeroPaddingAndListsExpandInOrder) {
  EXPECT_EQ(expand_shard_urls("http://h/s/train-{000008..000011}.tar"),
            (V{"http://h/s/train-000008.tar", "http://h/s/train-000009.tar",
               "http://h/s/train-000010.tar", "http://h/s/train-000011.tar"}));
  EXPECT_EQ(
      expand_shard_urls("https://h/{a,b}-{1..2}.tar"),
      (V{"https://h/a-1.tar", "https://h/a-2.tar", "https://h/b-1.tar", "https://h/b-2.tar"}));
  EXPECT_EQ(expand_shard_urls("  http://h/x.tar\nhttp://h/{9..10}.tar "),
            (V{"http://h/x.tar", "http://h/9.tar", "http://h/10.tar"}));
  EXPECT_EQ(expand_shard_urls("http://h/{0..099}.tar").size(), 100u);
  EXPECT_EQ(expand_shard_urls("http://h/{0..099}.tar")[7], "http://h/007.tar");
  EXPECT_EQ(url_folder("http://h/s/train-000001.tar"), "http://h/s");
}

TEST(ShardUrlsTest, MalformedPatternsAreRefusedNamingTheFlag) {
  EXPECT_TRUE(test::has(test::usage_error([] { expand_shard_urls("http://h/{1..3.tar"); }),
                        "--data_url http://h/{1..3.tar: unbalanced braces"));
  EXPECT_TRUE(test::has(test::usage_error([] { expand_shard_urls("http://h/{5..3}.tar"); }),
                        "the range {5..3} runs backwards"));
  EXPECT_TRUE(test::has(test::usage_error([] { expand_shard_urls("http://h/{a..c}.tar"); }),
                        "is not two numbers"));
  EXPECT_TRUE(test::has(test::usage_error([] { expand_shard_urls("shards/train-0.tar"); }),
                        "not an http:// or https:// URL (local shards: --data_dir DIR)"));
  EXPECT_TRUE(test::has(test::usage_error([] { expand_shard_urls("http://h/{0..99999999}.tar"); }),
                        "over a million shards"));
  EXPECT_TRUE(test::has(test::usage_error([] { expand_shard_urls(" "); }), "no URL"));
}

}  // namespace
}  // namespace ddpx::data
