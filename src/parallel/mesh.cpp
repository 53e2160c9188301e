// The device mesh (see mesh.h).
#include "parallel/mesh.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace ddpx::parallel {

namespace {

constexpr std::array<const char*, kMeshDims> kDimNames{"replicate", "shard", "pipeline", "context",
                                                       "tensor"};

}  // namespace

Mesh Mesh::build(const MeshSizes& s, int world) {
  const int p = s.pipeline, t = s.tensor, c = s.context;
  // The lines each flag's users know (tests/matrix/option_matrix.py, docs/cli.md): the pipeline's
  // first, then tensor parallelism's, alone or on the 3-D mesh.
  DDPX_CHECK(world >= 1, ErrorKind::kInternal, "a mesh over {} ranks", world);
  DDPX_CHECK(p >= 1 && world % p == 0, ErrorKind::kUsage,
             "--pipeline_parallel {} does not divide the world of {} ranks; run a multiple of {} "
             "ranks (stages x data-parallel replicas)",
             p, world, p);
  if (p > 1) {
    DDPX_CHECK(
        t >= 1 && world % (t * p) == 0, ErrorKind::kUsage,
        "--pipeline_parallel {} x --tensor_parallel {}: the world of {} ranks is not a "
        "whole number of {}-rank replicas; start a multiple of {} ranks (ddpx run {} -- ...)",
        p, t, world, t * p, t * p, t * p);
  } else {
    DDPX_CHECK(t >= 1 && world % t == 0, ErrorKind::kUsage,
               "--tensor_parallel {}: the world of {} ranks is not a whole number of "
               "tensor-parallel groups; start a multiple of {} ranks (ddpx run {} -- ...)",
               t, world, t, t);
  }
  DDPX_CHECK(c >= 1 && world % (p * c * t) == 0, ErrorKind::kUsage,
             "context parallelism {} x --pipeline_parallel {} x --tensor_parallel {}: the world "
             "of {} ranks is not a whole number of {}-rank replicas",
             c, p, t, world, p * c * t);
  Mesh mesh;
  const int data = world / (p * c * t);
  mesh.sizes_ = {s.sharded ? 1 : data, s.sharded ? data : 1, p, c, t};
  mesh.job_sizes_ = mesh.sizes_;
  mesh.world_ = world;
  return mesh;
}

bool Mesh::fits(const MeshSizes& s, int world) {
  return world >= 1 && s.pipeline >= 1 && s.tensor >= 1 && s.context >= 1 &&
         world % (s.pipeline * s.context * s.tensor) == 0;
}

int Mesh::data_rank(int rank) const {
  const Coordinates at = coordinates(rank);
  return at[index(MeshDim::kReplicate)] * size(MeshDim::kShard) + at[index(MeshDim::kShard)];
}

Mesh::Coordinates Mesh::coordinates(int rank) const {
  DDPX_CHECK(rank >= 0 && rank < world_, ErrorKind::kInternal, "rank {} is not in a mesh of {}",
             rank, world_);
  Coordinates at{};
  for (int d = kMeshDims - 1; d >= 0; --d) {
    at[d] = rank % sizes_[d];
    rank /= sizes_[d];
  }
  return at;
}

int Mesh::rank(const Coordinates& at) const {
  int rank = 0;
  for (int d = 0; d < kMeshDims; ++d) {
    DDPX_CHECK(at[d] >= 0 && at[d] < sizes_[d], ErrorKind::kInternal,
               "coordinate {} along {} is outside the mesh's {}", at[d], kDimNames[d], sizes_[d]);
    rank = rank * sizes_[d] + at[d];
  }
  return rank;
}

int Mesh::rank_with(int rank, MeshDim dim, int value) const {
  Coordinates at = coordinates(rank);
  at[index(dim)] = value;
  return this->rank(at);
}

std::vector<std::vector<int>> Mesh::groups(const std::vector<MeshDim>& dims) const {
  // A group's key: the coordinates outside `dims`, in row-major order.
  Coordinates key_sizes = sizes_;
  for (MeshDim dim : dims) key_sizes[index(dim)] = 1;
  int count = 1;
  for (int size : key_sizes) count *= size;
  std::vector<std::vector<int>> out(static_cast<size_t>(count));
  for (int r = 0; r < world_; ++r) {
    const Coordinates at = coordinates(r);
    int key = 0;
    for (int d = 0; d < kMeshDims; ++d) key = key * key_sizes[d] + (key_sizes[d] == 1 ? 0 : at[d]);
    out[static_cast<size_t>(key)].push_back(r);
  }
  return out;
}

std::vector<int> Mesh::group_of(int rank, const std::vector<MeshDim>& dims) const {
  for (auto& group : groups(dims)) {
    for (int r : group) {
      if (r == rank) return group;
    }
  }
  fail(ErrorKind::kInternal, "rank {} is not in a mesh of {}", rank, world_);
}

Mesh Mesh::slice(MeshDim dim, int value) const {
  const int d = index(dim);
  DDPX_CHECK(value >= 0 && value < sizes_[d], ErrorKind::kInternal,
             "a slice at {} along {}, of size {}", value, kDimNames[d], sizes_[d]);
  Mesh out = *this;
  out.world_ = world_ / sizes_[d];
  out.sizes_[d] = 1;
  out.fixed_[d] = value;
  return out;
}

int Mesh::job_rank(int rank) const {
  Coordinates at = coordinates(rank);
  for (int d = 0; d < kMeshDims; ++d) {
    if (fixed_[d] >= 0) at[d] = fixed_[d];
  }
  return job().rank(at);
}

std::vector<int> Mesh::job_group(int rank, MeshDim dim) const {
  return job().group_of(job_rank(rank), {dim});
}

Mesh Mesh::job() const {
  Mesh out = *this;
  out.sizes_ = job_sizes_;
  out.fixed_ = {-1, -1, -1, -1, -1};
  out.world_ = 1;
  for (int size : job_sizes_) out.world_ *= size;
  return out;
}

std::string Mesh::describe() const {
  std::vector<std::string> parts;
  for (int d = 0; d < kMeshDims; ++d) {
    if (sizes_[d] > 1) parts.push_back(fmt::format("{} {}", kDimNames[d], sizes_[d]));
  }
  return parts.empty() ? "1 rank" : fmt::format("{}", fmt::join(parts, " x "));
}

}  // namespace ddpx::parallel
