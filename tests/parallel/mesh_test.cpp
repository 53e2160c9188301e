// The device mesh (parallel/mesh.h): coordinates, the sub-groups' ranks every plan splits, slices
// and the lines it refuses impossible shapes with. Every layout up to 8 ranks is checked against
// the arithmetic the plans wrote out before the mesh (rank = (replica * P + stage) * T + tensor).
#include "parallel/mesh.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "core/error.h"

namespace ddpx::parallel {
namespace {

using Groups = std::vector<std::vector<int>>;
constexpr MeshDim kR = MeshDim::kReplicate, kS = MeshDim::kShard, kP = MeshDim::kPipeline,
                  kT = MeshDim::kTensor;

std::string refusal(const MeshSizes& sizes, int world) {
  try {
    Mesh::build(sizes, world);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    return e.what();
  }
  return "";
}

TEST(MeshTest, OneRankIsEveryDimensionOfOne) {
  const Mesh mesh = Mesh::build({}, 1);
  EXPECT_EQ(mesh.world_size(), 1);
  EXPECT_EQ(mesh.data_size(), 1);
  EXPECT_EQ(mesh.data_rank(0), 0);
  EXPECT_EQ(mesh.groups({kT}), (Groups{{0}}));
  EXPECT_EQ(mesh.describe(), "1 rank");
}

TEST(MeshTest, ThreeDimensionsOnEightRanksGiveTheirGroups) {
  // --pipeline_parallel 2 --tensor_parallel 2 on 8 ranks: 2 replicas of 2 stages of 2 ranks.
  const Mesh mesh = Mesh::build({/*pipeline=*/2, /*tensor=*/2}, 8);
  EXPECT_EQ(mesh.describe(), "replicate 2 x pipeline 2 x tensor 2");
  EXPECT_EQ(mesh.data_size(), 2);
  // Rank 6 is tensor rank 0 of stage 1 of replica 1.
  EXPECT_EQ(mesh.coordinate(kR, 6), 1);
  EXPECT_EQ(mesh.coordinate(kP, 6), 1);
  EXPECT_EQ(mesh.coordinate(kT, 6), 0);
  EXPECT_EQ(mesh.rank(mesh.coordinates(6)), 6);
  EXPECT_EQ(mesh.rank_with(6, kP, 0), 4);
  EXPECT_EQ(mesh.groups({kT}), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(mesh.groups({kP}), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(mesh.groups({kR, kS}), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(mesh.groups({kR, kS, kP}), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(mesh.group_of(5, {kT}), (std::vector<int>{4, 5}));

  // The pipeline of tensor rank 1: the job's ranks 1, 3, 5, 7 as ranks 0-3 of a data x pipeline
  // mesh, each with the tensor group it runs its stage with.
  const Mesh slice = mesh.slice(kT, 1);
  EXPECT_EQ(slice.world_size(), 4);
  EXPECT_EQ(slice.describe(), "replicate 2 x pipeline 2");
  EXPECT_EQ(slice.groups({kR, kS}), (Groups{{0, 2}, {1, 3}}));
  std::vector<int> job;
  for (int r = 0; r < slice.world_size(); ++r) job.push_back(slice.job_rank(r));
  EXPECT_EQ(job, (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(slice.job_group(2, kT), (std::vector<int>{4, 5}));
  EXPECT_EQ(slice.job().world_size(), 8);
}

TEST(MeshTest, ShardedDataRanksAreTheShardDimension) {
  const Mesh mesh = Mesh::build({/*pipeline=*/2, 1, 1, /*sharded=*/true}, 6);
  EXPECT_EQ(mesh.size(kR), 1);
  EXPECT_EQ(mesh.size(kS), 3);
  EXPECT_EQ(mesh.describe(), "shard 3 x pipeline 2");
  EXPECT_EQ(mesh.data_rank(5), 2);
  EXPECT_EQ(mesh.groups({kR, kS}), (Groups{{0, 2, 4}, {1, 3, 5}}));
}

// Every (world, P, T, sharded) up to 8 ranks against the plans' former arithmetic.
TEST(MeshTest, EveryLayoutUpToEightRanksMatchesTheRankFormula) {
  int layouts = 0;
  for (int world = 1; world <= 8; ++world) {
    for (int p = 1; p <= world; ++p) {
      for (int t = 1; p * t <= world; ++t) {
        if (world % (p * t) != 0) continue;
        for (const bool sharded : {false, true}) {
          SCOPED_TRACE(testing::Message() << "world " << world << " P " << p << " T " << t
                                          << (sharded ? " sharded" : ""));
          ++layouts;
          const Mesh mesh = Mesh::build({p, t, 1, sharded}, world);
          const int n = world / (p * t);
          ASSERT_EQ(mesh.data_size(), n);
          Groups tensor(static_cast<size_t>(world / t)), tensor_replicas(static_cast<size_t>(t));
          Groups replicas(static_cast<size_t>(p * t));
          for (int g = 0; g < world; ++g) {
            EXPECT_EQ(mesh.data_rank(g), g / (p * t));
            EXPECT_EQ(mesh.coordinate(kP, g), g / t % p);
            EXPECT_EQ(mesh.coordinate(kT, g), g % t);
            EXPECT_EQ(mesh.rank(mesh.coordinates(g)), g);
            tensor[static_cast<size_t>(g / t)].push_back(g);
            tensor_replicas[static_cast<size_t>(g % t)].push_back(g);
            replicas[static_cast<size_t>(g % (p * t))].push_back(g);
          }
          EXPECT_EQ(mesh.groups({kT}), tensor);
          EXPECT_EQ(mesh.groups({kR, kS, kP}), tensor_replicas);
          EXPECT_EQ(mesh.groups({kR, kS}), replicas);
          // The slice a pipeline of tensor-parallel stages runs on: rank r is the job's r*T + c,
          // its stage s of replica d the job's (d * P + s) * T + c, its replicas r % P apart.
          for (int c = 0; c < t; ++c) {
            const Mesh slice = mesh.slice(kT, c);
            ASSERT_EQ(slice.world_size(), world / t);
            Groups stage_replicas(static_cast<size_t>(p));
            for (int r = 0; r < slice.world_size(); ++r) {
              EXPECT_EQ(slice.job_rank(r), r * t + c);
              EXPECT_EQ(slice.coordinate(kP, r), r % p);
              EXPECT_EQ(slice.data_rank(r), r / p);
              EXPECT_EQ(slice.job_group(r, kT).front(), r * t);
              EXPECT_EQ(slice.job_group(r, kT).back(), r * t + t - 1);
              stage_replicas[static_cast<size_t>(r % p)].push_back(r);
              // The pipeline's link from stage e to the next: r - e + next.
              const int e = r % p, next = (e + 1) % p;
              EXPECT_EQ(slice.rank_with(r, kP, next), r - e + next);
            }
            EXPECT_EQ(slice.groups({kR, kS}), stage_replicas);
          }
        }
      }
    }
  }
  EXPECT_EQ(layouts, 2 * 38);  // the (P, T) pairs dividing 1..8 ranks, each sharded or not
}

TEST(MeshTest, GroupsPartitionTheRanks) {
  const Mesh mesh = Mesh::build({2, 2}, 8);
  for (const auto& dims : std::vector<std::vector<MeshDim>>{{kT}, {kP}, {kR, kS}, {kP, kT}}) {
    std::multiset<int> seen;
    for (const auto& group : mesh.groups(dims)) seen.insert(group.begin(), group.end());
    EXPECT_EQ(seen, (std::multiset<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  }
}

TEST(MeshTest, RefusesImpossibleShapesWithTheFlagsLine) {
  EXPECT_EQ(refusal({/*pipeline=*/2}, 3),
            "--pipeline_parallel 2 does not divide the world of 3 ranks; run a multiple of 2 "
            "ranks (stages x data-parallel replicas)");
  EXPECT_EQ(refusal({1, /*tensor=*/2}, 3),
            "--tensor_parallel 2: the world of 3 ranks is not a whole number of tensor-parallel "
            "groups; start a multiple of 2 ranks (ddpx run 2 -- ...)");
  EXPECT_EQ(refusal({2, 2}, 2),
            "--pipeline_parallel 2 x --tensor_parallel 2: the world of 2 ranks is not a whole "
            "number of 4-rank replicas; start a multiple of 4 ranks (ddpx run 4 -- ...)");
  EXPECT_EQ(refusal({2, 2}, 6),
            "--pipeline_parallel 2 x --tensor_parallel 2: the world of 6 ranks is not a whole "
            "number of 4-rank replicas; start a multiple of 4 ranks (ddpx run 4 -- ...)");
  // The pipeline's line first, where P alone does not divide the world (as ddpx train says it).
  EXPECT_EQ(refusal({2, 2}, 3),
            "--pipeline_parallel 2 does not divide the world of 3 ranks; run a multiple of 2 "
            "ranks (stages x data-parallel replicas)");
  EXPECT_EQ(refusal({0}, 4),
            "--pipeline_parallel 0 does not divide the world of 4 ranks; run a multiple of 0 "
            "ranks (stages x data-parallel replicas)");
  EXPECT_FALSE(Mesh::fits({2, 2}, 6));
  EXPECT_TRUE(Mesh::fits({2, 2}, 8));
}

}  // namespace
}  // namespace ddpx::parallel
