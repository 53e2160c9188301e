// The device mesh: the job's ranks laid out along named dimensions, one per parallelism, so that
// every plan, the trainer's sampler, the planner and `bench memory` read a rank's coordinates and
// its groups' ranks from one place (torchtitan's ParallelDims, c10d's DeviceMesh).
//
// A mesh is built once from the flags' sizes and the world size (Mesh::build), which refuses a
// shape the world cannot take with the one line of the flag that asked for it, before anything
// communicates. The dimensions, outermost first:
//   replicate  data-parallel replicas that keep whole copies (DDP)
//   shard      data-parallel ranks that split the state (ZeRO over all of them: --shard)
//   pipeline   a replica's stages (--pipeline_parallel)
//   context    room for context parallelism (a sequence split over ranks); always 1 today
//   tensor     the ranks that split a layer (--tensor_parallel)
// A rank's number is its coordinates in row-major order, tensor fastest: the T ranks of a layer
// are neighbours (one node's fastest links), then the stages of a replica, then the replicas:
// rank = ((replica * P + stage) * C + context) * T + tensor. The data-parallel coordinate is
// replicate x shard flattened (the sampler's rank).
//
// A slice is the mesh of the ranks that share a coordinate (slice(kTensor, t): the ranks of
// tensor rank t, the context a pipeline of tensor-parallel stages runs on); its ranks are
// numbered in the job's order, as dist::split_group numbers a group's, and job_rank() maps them
// back. groups() lists the partition dist::split_group takes, in the same order on every rank.
#pragma once

#include <array>
#include <string>
#include <vector>

namespace ddpx::parallel {

enum class MeshDim { kReplicate = 0, kShard, kPipeline, kContext, kTensor };
inline constexpr int kMeshDims = 5;

// What the flags ask for; the data-parallel size is what the world leaves.
struct MeshSizes {
  int pipeline = 1;  // --pipeline_parallel (1: none)
  int tensor = 1;    // --tensor_parallel (1: none)
  int context = 1;   // context parallelism: no flag yet
  // --shard: the data-parallel ranks shard the state (the shard dimension) rather than
  // replicate it (the replicate dimension).
  bool sharded = false;
};

class Mesh {
 public:
  using Coordinates = std::array<int, kMeshDims>;

  Mesh() = default;  // one rank

  // Throws ddpx::Error(kUsage) naming the flags when `world` is not a whole number of replicas
  // of pipeline x context x tensor ranks (or a size is below 1). Not collective.
  static Mesh build(const MeshSizes& sizes, int world);
  // Whether build() takes them (for callers with their own words: the planner's GPUs).
  static bool fits(const MeshSizes& sizes, int world);

  // Ranks of this mesh (of a slice: the slice's).
  int world_size() const { return world_; }
  int size(MeshDim dim) const { return sizes_[index(dim)]; }
  // The data-parallel ranks: replicate x shard, and a rank's place among them (the sampler's).
  int data_size() const { return size(MeshDim::kReplicate) * size(MeshDim::kShard); }
  int data_rank(int rank) const;

  // `rank`: a rank of this mesh, 0 <= rank < world_size().
  Coordinates coordinates(int rank) const;
  int coordinate(MeshDim dim, int rank) const { return coordinates(rank)[index(dim)]; }
  int rank(const Coordinates& coordinates) const;
  // The rank whose coordinates are `rank`'s but `dim`'s, which is `value`: a stage's neighbour.
  int rank_with(int rank, MeshDim dim, int value) const;

  // The partition of this mesh's ranks into groups that differ only along `dims`: one group for
  // each combination of the other coordinates, in row-major order, each group's ranks ascending
  // (a rank's place in its group is its rank there). dist::split_group takes it as it is.
  std::vector<std::vector<int>> groups(const std::vector<MeshDim>& dims) const;
  // The ranks of `rank`'s group along `dims` (an entry of groups()).
  std::vector<int> group_of(int rank, const std::vector<MeshDim>& dims) const;

  // The mesh of the ranks whose `dim` is `value` (that dimension of size 1 in it).
  Mesh slice(MeshDim dim, int value) const;
  // The job's rank of this mesh's `rank` (itself, unless this is a slice).
  int job_rank(int rank) const;
  // The job's ranks that share every coordinate with this mesh's `rank` but `dim`'s, ascending:
  // of a slice along `dim` too (the tensor ranks that run a pipeline stage with this one).
  std::vector<int> job_group(int rank, MeshDim dim) const;
  // The job's mesh (this one, unless this is a slice).
  Mesh job() const;

  // "replicate 2 x pipeline 2 x tensor 2" (the dimensions above 1; "1 rank" for none).
  std::string describe() const;

 private:
  static int index(MeshDim dim) { return static_cast<int>(dim); }

  Coordinates sizes_{1, 1, 1, 1, 1};       // this mesh's (a slice's dimension: 1)
  Coordinates job_sizes_{1, 1, 1, 1, 1};   // the job's
  Coordinates fixed_{-1, -1, -1, -1, -1};  // a slice's coordinate along a dimension, else -1
  int world_ = 1;
};

}  // namespace ddpx::parallel
